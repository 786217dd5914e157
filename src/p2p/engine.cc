// Engine setup, transports, link selection and the low-level send path. The protocol's
// message handling is in engine_ops.cc, the adaptive wait and progress thread in progress.cc.
#include "p2p/engine.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <thread>

#include "core/config.h"
#include "core/log.h"
#include "core/oversubscribe.h"
#include "p2p/engine_internal.h"
#include "p2p/link_choice.h"
#include "tpcomm/error.hpp"

namespace tpcomm::p2p {

std::string describe_bytes(DType t, uint64_t bytes) {
  size_t es = dtype_size(t);
  std::ostringstream os;
  os << dtype_name(t) << "[" << (es ? bytes / es : 0) << "] (" << bytes << " bytes)";
  return os.str();
}

std::string Op::describe() const {
  std::ostringstream os;
  if (kind == Kind::Send) {
    os << "send to rank " << peer;
  } else if (peer == kAnySource) {
    os << "recv from any rank";
  } else {
    os << "recv from rank " << peer;
  }
  os << " (group '" << group_name << "', tag " << tag << ", " << tensor.str() << ")";
  return os.str();
}

void SinkAdapter::on_message(int peer, std::span<const uint8_t> data) {
  if (!s_->used) e_->mark_used_locked(*s_);
  s_->note_heard(peer);  // liveness for the heartbeat
  e_->handle_message(*s_, peer, data);
}
void SinkAdapter::on_put_arrived(int peer, uint32_t imm) {
  s_->note_heard(peer);
  e_->handle_put_arrived(*s_, peer, imm);
}
void SinkAdapter::on_put_done(uint64_t cookie, bool ok) { e_->handle_put_done(*s_, cookie, ok); }
void SinkAdapter::on_peer_error(int peer, const std::string& reason) {
  e_->handle_peer_error(*s_, peer, reason);
}

Engine::Engine(const Options& options) : opt_(options) {}

std::shared_ptr<Engine> Engine::create(const Options& options) {
  std::shared_ptr<Engine> e(new Engine(options));
  // More ranks on this host than it has cores (LOCAL_WORLD_SIZE, from tprun or torchrun):
  // waits start yielding after 2 us, as the shm collectives' do, unless TPCOMM_WAIT_SPIN_US
  // says otherwise (docs/transport.md, Progress).
  e->spin_us_ =
      wait_spin_us(config::get_int("TPCOMM_WAIT_SPIN_US"), config::is_set("TPCOMM_WAIT_SPIN_US"),
                   config::is_set("LOCAL_WORLD_SIZE") ? config::get_int("LOCAL_WORLD_SIZE") : 0,
                   container_cpus());
  e->yield_us_ = config::get_int("TPCOMM_WAIT_YIELD_US");
  e->beat_interval_ = config::get_duration("TPCOMM_HEARTBEAT_INTERVAL");
  e->beat_timeout_ = config::get_duration("TPCOMM_HEARTBEAT_TIMEOUT");
  e->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  e->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (e->epoll_fd_ < 0 || e->wake_fd_ < 0)
    throw TransportError(std::string("p2p engine: cannot create epoll/eventfd: ") +
                         std::strerror(errno));
  epoll_watch(e->epoll_fd_, e->wake_fd_);
  e->prepare_backend(options.backend);
  std::vector<std::string> usable;
  for (auto& s : e->slots_)
    if (s->tr) usable.push_back(s->name);
  e->topo_ = publish_summary(*options.store, options.rank, options.host_id, usable);
  e->watch_ = std::make_shared<PeerWatch>(options.rank, options.world_size, options.host_id,
                                          e->beat_timeout_);
  options.store->set(PeerWatch::key(options.rank), e->watch_->self_record());
  // Last: a peer that sees the host id finds the addresses too (Engine::link_for).
  options.store->set("link/host/" + std::to_string(options.rank), options.host_id);
  e->progress_thread_ = std::thread([raw = e.get()] { raw->progress_thread_main(); });
  return e;
}

Engine::~Engine() { shutdown(); }

// ---- transports ------------------------------------------------------------------------

void Engine::mark_used_locked(Slot& s) {
  s.used = true;
  bool any = false, all = true;
  for (auto& sl : slots_) {
    if (!sl->tr || !sl->used) continue;
    any = true;
    all = all && sl->caps.progress_is_syscall;
  }
  syscall_polls_.store(any && all, std::memory_order_relaxed);
}

Slot* Engine::find_slot_locked(const std::string& name) {
  for (auto& s : slots_)
    if (s->name == name) return s.get();
  return nullptr;
}

Slot* Engine::make_slot_locked(const std::string& name) {
  if (Slot* s = find_slot_locked(name)) return s;
  auto slot = std::make_unique<Slot>(this, slots_.size(), name);
  slot->heard.assign(static_cast<size_t>(opt_.world_size), 0);
  std::vector<uint8_t> published;
  try {
    transport::TransportContext ctx;
    ctx.rank = opt_.rank;
    ctx.world_size = opt_.world_size;
    ctx.job_id = opt_.job_id;
    ctx.host_id = opt_.host_id;
    ctx.store = std::make_shared<PrefixStore>("tr/" + name, opt_.store);
    ctx.timeout = opt_.timeout;
    slot->tr = transport::create_transport(name, ctx);
    slot->caps = slot->tr->capabilities();
    if (slot->caps.recv_slots > 0 && slot->caps.recv_slots < 4)
      throw TransportError("transport '" + name + "' has " + std::to_string(slot->caps.recv_slots) +
                           " receive slots; credit-based flow control needs 0 or at least 4");
    if (slot->caps.max_message < kMaxCtsSize)
      throw TransportError("transport '" + name + "' has max_message " +
                           std::to_string(slot->caps.max_message) + ", the protocol needs " +
                           std::to_string(kMaxCtsSize));
    uint64_t threshold = config::is_set("TPCOMM_RNDV_THRESHOLD")
                             ? config::get_size("TPCOMM_RNDV_THRESHOLD")
                             : slot->caps.rndv_threshold;
    slot->eager_limit = std::min<uint64_t>(threshold, slot->caps.max_message - kHeaderSize);
    published.push_back(1);
    std::vector<uint8_t> addr = slot->tr->address();
    published.insert(published.end(), addr.begin(), addr.end());
    // The fd joins the progress thread's epoll set only while that thread sleeps (see
    // progress_thread_main); tried once here, so that one epoll cannot watch is known now.
    int fd = slot->tr->wait_fd();
    if (fd >= 0 && epoll_watch(epoll_fd_, fd)) {
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
      sleep_fds_.push_back(fd);
    } else {
      any_without_fd_ = true;
    }
    TPLOG(INFO, P2P) << "rank " << opt_.rank << ": transport " << name << " started (eager up to "
                     << slot->eager_limit << " bytes, "
                     << (slot->caps.native_put ? "native" : "emulated") << " put"
                     << (slot->caps.recv_slots
                             ? ", credits " + std::to_string(slot->caps.recv_slots)
                             : std::string())
                     << ")";
  } catch (const std::exception& ex) {
    slot->tr.reset();
    slot->unavailable = ex.what();
    published.assign(1, 0);
    published.insert(published.end(), slot->unavailable.begin(), slot->unavailable.end());
    TPLOG(INFO, P2P) << "rank " << opt_.rank << ": transport " << name
                     << " unavailable: " << ex.what();
  }
  opt_.store->set("link/" + name + "/" + std::to_string(opt_.rank), published);
  slots_.push_back(std::move(slot));
  return slots_.back().get();
}

namespace {

// TPCOMM_TRANSPORT: names in order of preference, "^name" excluded.
void transport_filter(std::vector<std::string>* wanted, std::vector<std::string>* excluded) {
  for (const std::string& item : config::get_list("TPCOMM_TRANSPORT")) {
    if (!item.empty() && item[0] == '^')
      excluded->push_back(item.substr(1));
    else
      wanted->push_back(item);
  }
}

bool is_auto(const std::string& backend) {
  return backend.empty() || backend == "auto" || backend == "gloo";
}

}  // namespace

std::vector<std::string> Engine::candidates_locked(const std::string& backend) {
  if (!is_auto(backend)) {
    if (!transport::has_transport(backend))
      throw InvalidArgument("backend '" + backend + "' is not built into this tpcomm (built: " +
                            [] {
                              std::string s;
                              for (auto& n : transport::transport_names()) s += n + " ";
                              return s;
                            }() +
                            "); use 'auto'");
    return {backend};
  }
  std::vector<std::string> wanted, excluded;
  transport_filter(&wanted, &excluded);
  std::vector<std::string> out = wanted.empty() ? transport::transport_names() : wanted;
  auto drop = [&](const std::string& n) {
    return std::find(excluded.begin(), excluded.end(), n) != excluded.end() ||
           !transport::has_transport(n);
  };
  out.erase(std::remove_if(out.begin(), out.end(), drop), out.end());
  return out;
}

void Engine::prepare_backend(const std::string& backend) {
  auto lk = lock_engine();
  for (const std::string& n : candidates_locked(backend)) make_slot_locked(n);
}

std::vector<uint8_t> Engine::peer_address(const std::string& transport, int peer) {
  std::string key = "link/" + transport + "/" + std::to_string(peer);
  {
    std::lock_guard<std::mutex> lk(cache_mu_);
    auto it = addr_cache_.find(key);
    if (it != addr_cache_.end()) return it->second;
  }
  std::vector<uint8_t> v = opt_.store->get(key);
  std::lock_guard<std::mutex> lk(cache_mu_);
  addr_cache_[key] = v;
  return v;
}

std::string Engine::peer_host(int peer) {
  {
    std::lock_guard<std::mutex> lk(cache_mu_);
    auto it = host_cache_.find(peer);
    if (it != host_cache_.end()) return it->second;
  }
  std::string h = opt_.store->get_string("link/host/" + std::to_string(peer));
  std::lock_guard<std::mutex> lk(cache_mu_);
  host_cache_[peer] = h;
  return h;
}

// Interim link selection (until the topology layer decides): the first candidate that both
// ends run, that reaches the peer (host-only transports need the same host id), in the
// order TPCOMM_TRANSPORT gives or, by default, host-local transports first, then by
// advertised bandwidth. Symmetric: both ends see the same facts.
std::string Engine::choose_locked(const std::string& backend, int peer, std::string* reason) {
  std::string topo_note;
  if (is_auto(backend) && topo_ && topo_->ok) {
    std::optional<topo::Summary> ps = peer_summary(*topo_, *opt_.store, peer);  // cached
    if (ps) {
      std::vector<std::string> available;
      for (const std::string& n : candidates_locked(backend)) {
        Slot* s = make_slot_locked(n);
        if (s->tr) available.push_back(n);
      }
      topo::LinkChoice c =
          topo::select_link(topo_->mine, *ps, available, topo::SelectOptions::from_config());
      Slot* s = c.ok() ? find_slot_locked(c.transport) : nullptr;
      if (s && s->tr) {
        std::vector<uint8_t> addr = peer_address(s->name, peer);
        if (!addr.empty() && addr[0] == 1) {
          *reason = c.reason;
          return c.transport;
        }
        topo_note = "topology chose " + c.transport + " (" + c.reason + ") but rank " +
                    std::to_string(peer) + " published no usable " + c.transport + " address";
      } else {
        topo_note = "topology found no transport (" + c.reason + ")";
      }
    } else {
      topo_note = "rank " + std::to_string(peer) + " published no topology summary";
    }
  } else if (is_auto(backend) && topo_) {
    topo_note = "no topology summary here (" + topo_->error + ")";
  }
  std::vector<Slot*> order;
  std::vector<std::string> wanted, excluded;
  if (is_auto(backend)) transport_filter(&wanted, &excluded);
  for (const std::string& n : candidates_locked(backend)) order.push_back(make_slot_locked(n));
  if (is_auto(backend) && wanted.empty()) {
    std::stable_sort(order.begin(), order.end(), [](Slot* a, Slot* b) {
      auto rank = [](Slot* s) {
        return s->tr ? (s->caps.reach == transport::Reach::Host ? 0 : 1) : 2;
      };
      if (rank(a) != rank(b)) return rank(a) < rank(b);
      return a->tr && b->tr && a->caps.bandwidth_gbps > b->caps.bandwidth_gbps;
    });
  }
  bool shm_off = is_auto(backend) && config::get_bool("TPCOMM_SHM_DISABLE");
  std::string tried;
  std::string my_host = opt_.host_id;
  for (Slot* s : order) {
    auto note = [&](const std::string& why) { tried += "\n  " + s->name + ": " + why; };
    if (!s->tr) {
      note("not available on rank " + std::to_string(opt_.rank) + " (" + s->unavailable + ")");
      continue;
    }
    if (s->caps.reach == transport::Reach::Host) {
      if (shm_off) {
        note("host-local transports disabled by TPCOMM_SHM_DISABLE");
        continue;
      }
      std::string ph = peer_host(peer);
      if (ph != my_host) {
        note("reaches this host only; rank " + std::to_string(peer) + " runs on host '" + ph +
             "', rank " + std::to_string(opt_.rank) + " on '" + my_host + "'");
        continue;
      }
    }
    std::vector<uint8_t> addr = peer_address(s->name, peer);
    if (addr.empty() || addr[0] != 1) {
      note("not available on rank " + std::to_string(peer) + " (" +
           (addr.empty() ? std::string("no address") : std::string(addr.begin() + 1, addr.end())) +
           ")");
      continue;
    }
    *reason = !is_auto(backend)
                  ? "backend '" + backend + "' asks for it"
                  : "fallback order (" +
                        (topo_note.empty() ? std::string("TPCOMM_TRANSPORT") : topo_note) +
                        "): first transport both ranks run that reaches the peer" + tried;
    return s->name;
  }
  if (!topo_note.empty()) tried = "\n  " + topo_note + tried;
  throw TransportError("no transport connects rank " + std::to_string(opt_.rank) + " to rank " +
                       std::to_string(peer) + " for backend '" + backend +
                       "':" + (tried.empty() ? std::string(" none is built in") : tried));
}

Link* Engine::link_locked(Slot& s, int peer) {
  auto it = links_.find(link_key(s.index, peer));
  if (it != links_.end()) return it->second.get();
  std::vector<uint8_t> addr = peer_address(s.name, peer);
  if (addr.empty() || addr[0] != 1)
    throw TransportError("rank " + std::to_string(peer) + " has no usable " + s.name + " address");
  auto deadline = std::chrono::steady_clock::now() + opt_.timeout;
  transport::Endpoint* connected = nullptr;
  try {
    connected = &s.tr->connect(peer, std::span<const uint8_t>(addr).subspan(1), deadline);
  } catch (const Error& e) {
    // A peer that died before anyone connected to it refuses the connection: say so (its
    // pidfd turns readable a moment after its sockets close).
    std::string why;
    watch_->resolve(*opt_.store, true);  // no-op once every peer is known (the usual case)
    for (int i = 0; i < 10 && why.empty(); ++i) {
      why = watch_->failure(peer);
      if (why.empty() && watch_->local(peer))
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      else
        break;
    }
    if (why.empty()) throw;
    fail_peer_locked(peer, why);
    throw PeerError("connecting to rank " + std::to_string(peer) + " over " + s.name + " failed (" +
                    e.what() + "): rank " + std::to_string(peer) + " is " + dead_peers_[peer]);
  }
  transport::Endpoint& ep = *connected;
  mark_used_locked(s);
  auto l = std::make_unique<Link>();
  l->slot = &s;
  l->peer = peer;
  l->ep = &ep;
  l->eager_limit = s.eager_limit;
  l->slots = s.caps.recv_slots;
  l->flow = l->slots > 0;
  l->credits = l->slots;
  Link* raw = l.get();
  links_.emplace(link_key(s.index, peer), std::move(l));
  return raw;
}

int Engine::backend_id_locked(const std::string& backend) {
  for (size_t i = 0; i < backends_.size(); ++i)
    if (backends_[i] == backend) return static_cast<int>(i);
  backends_.push_back(backend);
  return static_cast<int>(backends_.size() - 1);
}

Link* Engine::link_for(std::unique_lock<std::mutex>& lk, const std::string& backend, int peer,
                       int backend_id) {
  if (backend_id < 0) backend_id = backend_id_locked(backend);
  auto bid = static_cast<size_t>(backend_id);
  auto p = static_cast<size_t>(peer);
  if (bid < chosen_fast_.size() && p < chosen_fast_[bid].size() && chosen_fast_[bid][p])
    return chosen_fast_[bid][p];
  uint64_t key = (static_cast<uint64_t>(backend_id) << 32) | static_cast<uint32_t>(peer);
  auto it = chosen_.find(key);
  if (it != chosen_.end()) return it->second;
  // First contact: learn the peer's host without holding the engine lock (a store round
  // trip, which blocks until the peer has started). Its engine publishes its addresses
  // before its host, so those lookups below find them at once.
  lk.unlock();
  peer_host(peer);
  // Published before the host; only the auto backend's choice reads it.
  if (is_auto(backend) && topo_ && topo_->ok) peer_summary(*topo_, *opt_.store, peer);
  lk.lock();
  if (shut_down_)
    throw AbortedError("rank " + std::to_string(opt_.rank) +
                       ": the process group was destroyed while connecting to rank " +
                       std::to_string(peer));
  it = chosen_.find(key);
  if (it != chosen_.end()) return it->second;
  std::string reason;
  std::string name = choose_locked(backend, peer, &reason);
  Slot* s = find_slot_locked(name);
  Link* l = link_locked(*s, peer);
  l->reason = reason;
  chosen_[key] = l;
  if (peer >= 0 && peer < opt_.world_size) {
    if (chosen_fast_.size() <= bid) chosen_fast_.resize(bid + 1);
    chosen_fast_[bid].resize(static_cast<size_t>(opt_.world_size), nullptr);
    chosen_fast_[bid][p] = l;
  }
  TPLOG(INFO, P2P) << "rank " << opt_.rank << " -> rank " << peer << ": " << name << " (host '"
                   << opt_.host_id << "' / '" << peer_host(peer) << "', backend " << backend
                   << "): " << reason;
  return l;
}

Engine::LinkDescription Engine::describe_link(const std::string& backend, int peer) {
  auto lk = lock_engine();
  Link* l = link_for(lk, backend, peer);
  return {l->slot->name, l->reason};
}

std::string Engine::transport_for(const std::string& backend, int peer) {
  auto lk = lock_engine();
  return link_for(lk, backend, peer)->slot->name;
}

transport::Capabilities Engine::link_capabilities(const std::string& backend, int peer) {
  auto lk = lock_engine();
  return link_for(lk, backend, peer)->slot->caps;
}

void Engine::connect_all(const std::string& backend, const std::vector<int>& peers,
                         Deadline deadline) {
  std::vector<Link*> links;
  {
    auto lk = lock_engine();
    for (int p : peers)
      if (p != opt_.rank) links.push_back(link_for(lk, backend, p));
  }
  for (;;) {
    std::string missing;
    {
      auto lk = lock_engine();
      progress_locked();
      for (Link* l : links) {
        if (l->failed)
          throw PeerError("connecting to rank " + std::to_string(l->peer) +
                          " failed: " + dead_peers_[l->peer]);
        if (!l->ep->ready()) missing += " " + std::to_string(l->peer);
      }
    }
    if (missing.empty()) return;
    if (deadline.expired())
      throw TimeoutError("rank " + std::to_string(opt_.rank) +
                         ": connections not established after " +
                         std::to_string(opt_.timeout.count()) + " ms to ranks" + missing +
                         " (TPCOMM_CONNECT=eager); are those ranks running?");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// ---- the low-level send path ------------------------------------------------------------

bool Engine::post_msg_locked(Link& l, uint8_t* hdr, size_t hdr_len, const void* payload, size_t len,
                             const std::shared_ptr<Op>& op) {
  if (l.failed) {
    if (op && !op->done)
      fail_locked(op, std::make_exception_ptr(
                          PeerError(op->describe() + " failed: " + dead_peers_[l.peer])));
    return true;
  }
  uint32_t returned = 0;
  if (l.flow) {
    bool credit_only = hdr[2] == static_cast<uint8_t>(MsgType::Credit);
    if (l.credits < (credit_only ? 1u : 2u)) return false;
    returned = l.owed;
    std::memcpy(hdr + 4, &returned, 4);  // Header::credits
    l.owed = 0;
  }
  iovec iov[2] = {{hdr, hdr_len}, {const_cast<void*>(payload), len}};
  switch (l.ep->send(std::span<const iovec>(iov, len ? 2 : 1))) {
    case transport::PostStatus::Ok:
      if (l.flow) --l.credits;
      // The transport deferred part of the post to its next progress(): when the progress
      // thread sleeps (no thread waited here for a while), wake it so that one runs soon.
      if (progress_sleeping_.load(std::memory_order_relaxed) && l.slot->tr->needs_progress())
        wake_progress_thread();
      if (op) complete_locked(op);  // eager send: buffered, done
      return true;
    case transport::PostStatus::NoResource:
      if (l.flow) l.owed += returned;
      return false;
    case transport::PostStatus::PeerFailed:
      if (op && !op->done)
        fail_locked(op, std::make_exception_ptr(PeerError(op->describe() +
                                                          " failed: the connection to rank " +
                                                          std::to_string(l.peer) + " is broken")));
      return true;
  }
  return true;
}

bool Engine::try_post_locked(Link& l, Pending& p) {
  if (p.is_discard) {
    if (!l.failed && !dead_peers_.count(l.peer)) l.slot->tr->discard_tagged(l.peer, p.data_id);
    return true;
  }
  if (!p.is_put)
    return post_msg_locked(l, p.hdr.data(), p.hdr.size(), p.payload, p.payload_len, p.op);
  if (l.failed) {
    if (!p.op->done)
      fail_locked(p.op, std::make_exception_ptr(
                            PeerError(p.op->describe() + " failed: " + dead_peers_[l.peer])));
    return true;
  }
  if (l.flow && l.credits < 2) return false;
  transport::PostStatus ps;
  if (p.is_tagged && !p.hdr.empty()) {
    iovec rts{p.hdr.data(), p.hdr.size()};
    ps = l.ep->send_tagged_with_message({&rts, 1}, *p.op->mr, p.offset, p.length, p.op->data_id,
                                        p.op->id);
  } else if (p.is_tagged) {
    ps = l.ep->send_tagged(*p.op->mr, p.offset, p.length, p.op->data_id, p.op->id);
  } else {
    ps = l.ep->put(*p.op->mr, p.offset, p.key, p.offset, p.length, p.imm, p.op->id);
  }
  switch (ps) {
    case transport::PostStatus::Ok:
      if (l.flow) --l.credits;
      return true;
    case transport::PostStatus::NoResource:
      return false;
    case transport::PostStatus::PeerFailed:
      if (!p.op->done)
        fail_locked(p.op, std::make_exception_ptr(
                              PeerError(p.op->describe() + " failed: the connection to rank " +
                                        std::to_string(l.peer) + " is broken")));
      return true;
  }
  return true;
}

void Engine::flush_queue_locked(Link& l) {
  while (!l.queue.empty()) {
    if (!try_post_locked(l, l.queue.front())) return;
    l.queue.pop_front();
  }
}

void Engine::send_msg_locked(Link& l, uint8_t* hdr, size_t hdr_len, const void* payload, size_t len,
                             const std::shared_ptr<Op>& op) {
  // The common case posts straight from the caller's stack; only a message that has to wait
  // is copied into the queue.
  if (l.queue.empty() && post_msg_locked(l, hdr, hdr_len, payload, len, op)) return;
  Pending p;
  p.hdr.assign(hdr, hdr + hdr_len);
  p.payload = payload;
  p.payload_len = len;
  p.op = op;
  if (p.op) p.op->stage = Op::Stage::Queued;
  l.queue.push_back(std::move(p));
  backlog_.insert(&l);
}

void Engine::send_put_locked(Link& l, std::shared_ptr<Op> op, size_t offset, size_t length,
                             const transport::RemoteKey& key, uint32_t imm) {
  Pending p;
  p.is_put = true;
  p.op = std::move(op);
  p.offset = offset;
  p.length = length;
  p.key = key;
  p.imm = imm;
  if (l.queue.empty() && try_post_locked(l, p)) return;
  l.queue.push_back(std::move(p));
  backlog_.insert(&l);
}

void Engine::send_tagged_locked(Link& l, std::shared_ptr<Op> op, std::span<const uint8_t> rts) {
  Pending p;
  p.is_put = true;
  p.is_tagged = true;
  p.hdr.assign(rts.begin(), rts.end());
  p.length = op->tensor.nbytes();
  p.op = std::move(op);
  if (l.queue.empty() && try_post_locked(l, p)) return;
  l.queue.push_back(std::move(p));
  backlog_.insert(&l);
}

void Engine::return_credits_locked(Link& l) {
  // Once half the slots are owed (and we hold a credit for the message itself), return them
  // explicitly. Each credit message consumes a slot too, but it returns at least two, so
  // credit-only traffic dies out instead of ping-ponging; and two peers can never both wait
  // for credits (docs/transport.md, "Flow control").
  if (!l.flow || l.owed < l.slots / 2 || l.credits < 1 || l.failed) return;
  Header h;
  h.type = MsgType::Credit;
  h.src = opt_.rank;
  uint8_t hdr[kHeaderSize];
  encode_header(h, hdr);
  // Bypasses the queue: the peer may be waiting for exactly these credits.
  (void)post_msg_locked(l, hdr, kHeaderSize, nullptr, 0, nullptr);
}

}  // namespace tpcomm::p2p
