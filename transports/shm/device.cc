// shm transport: connection management (sockets, handshake, ring segments), progress and
// the blocking-wait protocol.
#include "transports/shm/device.h"

#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstring>

#include "core/cross_memory.h"
#include "core/log.h"
#include "tpcomm/error.hpp"
#include "transports/shm/segment.h"

namespace tpcomm::transport::shm {

namespace {

using Clock = std::chrono::steady_clock;

// How often a spinning progress() looks at the sockets (doorbells, handshakes, dead peers):
// a system call, so rarely enough that a spinning wait seldom sits in it when a message
// arrives (every ~30 us of spinning). A sleeping process watches the sockets by epoll.
constexpr uint32_t kSocketPassEvery = 1024;

uint64_t random_u64() {
  uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != sizeof v) {
    v = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^
        (static_cast<uint64_t>(::getpid()) << 32);
  }
  return v;
}

sockaddr_un abstract_addr(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  a.sun_path[0] = '\0';
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

bool peer_cred(int sock, ucred* cred) {
  socklen_t len = sizeof *cred;
  return ::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, cred, &len) == 0;
}

std::atomic<uint64_t> g_instances{0};

}  // namespace

ShmTransport::ShmTransport(const TransportContext& ctx, const Settings& settings)
    : ctx_(ctx), cfg_(settings), regions_(std::make_shared<RegionTable>()) {
  if (ctx_.rank < 0 || ctx_.world_size <= 0 || ctx_.rank >= ctx_.world_size) {
    throw InvalidArgument("shm: bad rank " + std::to_string(ctx_.rank) + " of world size " +
                          std::to_string(ctx_.world_size));
  }
  // Fail early, with both sizes, when not even one ring fits.
  FsSpace sp = fs_space(cfg_.dir);
  size_t one = ring_segment_bytes(cfg_.ring_bytes);
  if (sp.total > 0 && one > sp.free) {
    throw TransportError(
        "shm: a ring of rank " + std::to_string(ctx_.rank) + " needs " + format_bytes(one) +
        " of shared memory (TPCOMM_SHM_RING_SIZE=" + format_bytes(cfg_.ring_bytes) + "), but " +
        cfg_.dir + " has only " + format_bytes(sp.free) + " free (of " + format_bytes(sp.total) +
        "); enlarge it (docker run --shm-size=..., or mount -o remount,size=... " + cfg_.dir +
        ") or lower TPCOMM_SHM_RING_SIZE");
  }
  instance_ = random_u64();
  probe_word_ = random_u64() | 1;
  socket_name_ = "tpcomm-shm/" + std::to_string(::getpid()) + "/" +
                 std::to_string(g_instances.fetch_add(1)) + "/" +
                 std::to_string(instance_ % 1000000);
  listener_ = net::Fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener_.valid()) {
    throw TransportError(std::string("shm: cannot create a unix socket: ") + std::strerror(errno));
  }
  socklen_t len;
  sockaddr_un a = abstract_addr(socket_name_, &len);
  if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&a), len) != 0 ||
      ::listen(listener_.get(), SOMAXCONN) != 0) {
    throw TransportError("shm: cannot listen on abstract unix socket @" + socket_name_ + ": " +
                         std::strerror(errno));
  }
  epoll_ = net::Fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) {
    throw TransportError(std::string("shm: epoll_create1: ") + std::strerror(errno));
  }
  watch(listener_.get(), kTagListener);
  probe_cap_ = static_cast<size_t>(ctx_.world_size);
  probes_ = std::make_unique<RingProbe[]>(probe_cap_);
  if (cfg_.cma) xmem::allow_cross_memory_access();
  TPLOG(INFO, SHM) << "shm: rank " << ctx_.rank << " listening on @" << socket_name_ << " (ring "
                   << format_bytes(cfg_.ring_bytes) << ", max message " << cfg_.max_message
                   << " bytes, cross-memory puts " << (cfg_.cma ? "on" : "off") << ")";
}

ShmTransport::~ShmTransport() {
  if (!unfenced_.empty()) check_unfenced();
  // Say goodbye on every socket so that peers tell a clean shutdown from a crash.
  Control bye;
  bye.type = ControlType::Bye;
  bye.src_rank = ctx_.rank;
  std::vector<uint8_t> msg;
  for (auto& [peer, ep] : eps_) {
    bye.dst_rank = peer;
    msg = encode_control(bye);
    if (ep->out_sock_.valid()) (void)send_message(ep->out_sock_.get(), msg);
    if (ep->in_sock_.valid()) (void)send_message(ep->in_sock_.get(), msg);
  }
}

Capabilities ShmTransport::capabilities() const {
  Capabilities c;
  c.reach = Reach::Host;
  c.native_put = cfg_.cma;
  c.native_get = false;
  c.max_message = cfg_.max_message;
  c.max_put = SIZE_MAX;
  c.recv_slots = 0;
  c.rndv_threshold = cfg_.max_message;
  c.latency_us = 0.2;
  c.bandwidth_gbps = 80.0;
  c.cuda_memory = false;
  return c;
}

std::vector<uint8_t> ShmTransport::address() const {
  PeerInfo me;
  me.pid = static_cast<uint32_t>(::getpid());
  me.uid = static_cast<uint32_t>(::getuid());
  me.instance = instance_;
  me.probe_addr = reinterpret_cast<uint64_t>(&probe_word_);
  me.probe_cookie = probe_word_;
  me.socket_name = socket_name_;
  return encode_address(me);
}

std::unique_ptr<MemoryRegion> ShmTransport::register_memory(void* addr, size_t length,
                                                            Device device) {
  if (device.type != DeviceType::CPU) {
    throw NotSupportedError("shm: cannot register memory of device " + device.str() +
                            " (host memory only; GPU buffers go through CUDA IPC or staging)");
  }
  if (addr == nullptr && length > 0) {
    throw InvalidArgument("shm: register_memory of " + std::to_string(length) +
                          " bytes at a null address");
  }
  return std::make_unique<ShmMemoryRegion>(addr, length, device, instance_, regions_);
}

void ShmTransport::watch(int fd, uint64_t tag, bool retag) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = tag;
  if (::epoll_ctl(epoll_.get(), retag ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0) {
    TPLOG(WARN, SHM) << "shm: epoll_ctl: " << std::strerror(errno);
  }
}

ShmEndpoint& ShmTransport::make_endpoint(int peer) {
  auto& slot = eps_[peer];
  if (!slot) slot = std::make_unique<ShmEndpoint>(*this, peer);
  return *slot;
}

Endpoint& ShmTransport::connect(int peer, std::span<const uint8_t> peer_address,
                                std::chrono::steady_clock::time_point deadline) {
  if (peer < 0 || peer >= ctx_.world_size) {
    throw InvalidArgument("shm: connect to rank " + std::to_string(peer) + ", outside world size " +
                          std::to_string(ctx_.world_size));
  }
  auto it = eps_.find(peer);
  if (it != eps_.end()) return *it->second;
  PeerInfo info = decode_address(peer_address, "rank " + std::to_string(peer));
  auto ep = std::make_unique<ShmEndpoint>(*this, peer);
  ep->info_ = info;
  ep->have_info_ = true;
  start_out(*ep, deadline);  // throws before anything is kept
  ShmEndpoint& ref = *ep;
  eps_[peer] = std::move(ep);
  try_connect(ref);
  return ref;
}

void ShmTransport::start_out(ShmEndpoint& ep, std::chrono::steady_clock::time_point deadline) {
  // The staging area stays a hole in the file until the first large put claims it.
  const size_t stage = cfg_.stage_chunk * cfg_.stage_slots;
  ep.out_seg_ = Segment::create(
      ring_segment_bytes(cfg_.ring_bytes, stage), cfg_.dir,
      "the ring from rank " + std::to_string(ctx_.rank) + " to rank " + std::to_string(ep.peer_),
      ring_segment_bytes(cfg_.ring_bytes));
  ep.out_.init(ep.out_seg_.base(), cfg_.ring_bytes, random_u64(), ctx_.rank, ep.peer_,
               cfg_.stage_chunk, cfg_.stage_slots);
  ep.out_state_ = ShmEndpoint::OutState::Connecting;
  ep.deadline_ = deadline;
  ep.next_try_ = Clock::now();
  ++handshaking_;
  note_busy();
}

void ShmTransport::try_connect(ShmEndpoint& ep) {
  if (ep.failed_ || ep.out_state_ != ShmEndpoint::OutState::Connecting) return;
  net::Fd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!sock.valid()) {
    fail(ep, std::string("shm: cannot create a unix socket: ") + std::strerror(errno));
    return;
  }
  socklen_t len;
  sockaddr_un a = abstract_addr(ep.info_.socket_name, &len);
  if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&a), len) != 0) {
    int err = errno;
    if (err == EAGAIN || err == EINTR) {  // listen backlog full: try again shortly
      ep.next_try_ = Clock::now() + std::chrono::milliseconds(1);
      return;
    }
    fail(ep, "shm: cannot reach " + ep.who() + " at unix socket @" + ep.info_.socket_name + ": " +
                 std::strerror(err) +
                 " (the process exited, or it runs in another network namespace; "
                 "TPCOMM_SHM_DISABLE=1 uses the network transports instead)");
    return;
  }
  ucred cred{};
  if (peer_cred(sock.get(), &cred)) ep.pid_ = cred.pid;
  if (ep.pid_ == 0) ep.pid_ = static_cast<pid_t>(ep.info_.pid);
  // The sockets alone do not prove the peer alive: a child it forked may hold them open. A
  // pidfd polls readable when the process itself exits.
  if (ep.pid_ != ::getpid()) {
    ep.pidfd_ = net::Fd(static_cast<int>(::syscall(SYS_pidfd_open, ep.pid_, 0)));
    if (ep.pidfd_.valid()) watch(ep.pidfd_.get(), kTagPid | static_cast<uint32_t>(ep.peer_));
  }
  Control hello;
  hello.type = ControlType::Hello;
  hello.src_rank = ctx_.rank;
  hello.dst_rank = ep.peer_;
  hello.world_size = ctx_.world_size;
  hello.segment_bytes = ep.out_seg_.size();
  hello.ring_bytes = cfg_.ring_bytes;
  hello.from.pid = static_cast<uint32_t>(::getpid());
  hello.from.uid = static_cast<uint32_t>(::getuid());
  hello.from.instance = instance_;
  hello.from.probe_addr = reinterpret_cast<uint64_t>(&probe_word_);
  hello.from.probe_cookie = probe_word_;
  hello.from.socket_name = socket_name_;
  hello.job_id = ctx_.job_id;
  int err = send_message(sock.get(), encode_control(hello), ep.out_seg_.fd());
  if (err != 0) {
    fail(ep, "shm: cannot send the handshake to " + ep.who() + ": " + std::strerror(err));
    return;
  }
  // The peer's copy travels in the socket. Ours goes now: a child this process forks would
  // keep the file (and its /dev/shm space) alive through it.
  ep.out_seg_.close_fd();
  ep.out_sock_ = std::move(sock);
  ep.out_state_ = ShmEndpoint::OutState::HelloSent;
  watch(ep.out_sock_.get(), kTagOut | static_cast<uint32_t>(ep.peer_));

  // Can we write straight into the peer's memory?
  if (!cfg_.cma) {
    TPLOG(INFO, SHM) << "shm: rank " << ctx_.rank << " -> " << ep.who()
                     << ": puts copy through the ring (TPCOMM_SHM_CMA=0)";
    return;
  }
  std::string why = xmem::probe_cross_memory(ep.pid_, ep.info_.probe_addr, ep.info_.probe_cookie);
  ep.cma_ = why.empty();
  if (ep.cma_) {
    TPLOG(INFO, SHM) << "shm: rank " << ctx_.rank << " -> " << ep.who()
                     << ": puts by single-copy cross-memory write (process_vm_writev)";
  } else {
    TPLOG(WARN, SHM) << "shm: rank " << ctx_.rank << " -> " << ep.who()
                     << ": cross-memory writes refused: " << why
                     << "; puts fall back to copying through the shared ring (two copies)";
  }
}

void ShmTransport::fail(ShmEndpoint& ep, const std::string& reason) {
  if (ep.failed_) return;
  ep.failed_ = true;
  TPLOG(WARN, SHM) << "shm: rank " << ctx_.rank << ": connection to " << ep.who()
                   << " failed: " << reason;
  for (const PutOp& op : ep.puts_)
    events_.push_back({Event::Kind::PutDone, ep.peer_, op.cookie, false, {}});
  puts_pending_ -= ep.puts_.size();
  ep.puts_.clear();
  ep.helping_.clear();
  events_.push_back({Event::Kind::PeerError, ep.peer_, 0, false, reason});
  note_busy();
  ep.in_.set_probe(nullptr);  // its ring is no longer read
  ep.out_sock_.reset();       // the peer sees end of stream and reports us in turn
  ep.in_sock_.reset();
  ep.pidfd_.reset();
  ep.in_attached_ = false;
}

void ShmTransport::peer_closed(ShmEndpoint& ep, EventSink& sink, const std::string& how) {
  if (ep.failed_) return;
  // Deliver what the peer wrote before it went away.
  for (int i = 0; i < 1024 && ep.in_attached_ && ep.in_.has_data() && !ep.failed_; ++i) {
    ep.poll_in(sink);
  }
  // A goodbye may still sit unread in a socket (the pidfd can fire first).
  for (net::Fd* sock : {&ep.in_sock_, &ep.out_sock_}) {
    uint8_t buf[kMaxControl];
    for (int i = 0; sock->valid() && i < 64; ++i) {
      int fd = -1;
      ssize_t n = recv_message(sock->get(), {buf, sizeof buf}, &fd);
      if (fd >= 0) ::close(fd);
      if (n <= 0) break;
      Control c;
      if (n > 1 && n <= static_cast<ssize_t>(sizeof buf) &&
          decode_control({buf, static_cast<size_t>(n)}, &c).empty() && c.type == ControlType::Bye) {
        ep.bye_ = true;
      }
    }
  }
  std::string reason;
  if (ep.bye_) {
    reason = "shm: " + ep.who() + " closed its connection (its transport was shut down)";
  } else {
    reason = "shm: " + ep.who() + " went away without a goodbye (" + how +
             "): the process exited, crashed or was killed";
  }
  fail(ep, reason);
}

int ShmTransport::deliver(EventSink& sink) {
  int n = 0;
  size_t count = events_.size();  // events queued by the callbacks wait for the next call
  for (size_t i = 0; i < count && !events_.empty(); ++i) {
    Event e = std::move(events_.front());
    events_.pop_front();
    ++n;
    if (e.kind == Event::Kind::PutDone) {
      sink.on_put_done(e.cookie, e.ok);
    } else {
      sink.on_peer_error(e.peer, e.reason);
    }
  }
  return n;
}

void ShmTransport::check_unfenced() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (ShmEndpoint* ep : unfenced_) {
    ep->unfenced_ = false;
    if (!ep->failed_ && ep->out_.take_sleeper()) ep->ring_peer(ep->out_sock_.get());
  }
  unfenced_.clear();
}

int ShmTransport::progress(EventSink& sink) {
  int n = 0;
  ++progress_rounds_;
  if (!unfenced_.empty()) check_unfenced();
  bool sockets = false;
  if (armed_) {
    armed_ = false;
    sockets = true;
    for (ShmEndpoint* ep : readers_) ep->in_.set_sleeping(false);
  }
  if (!events_.empty()) n += deliver(sink);
  if (puts_pending_ > 0) {
    for (auto& [peer, ep] : eps_)
      if (!ep->puts_.empty()) ep->advance_puts();
  }
  bool compact = false;
  for (size_t i = 0; i < readers_.size(); ++i) {
    ShmEndpoint* ep = readers_[i];
    if (ep->in_attached_) {
      // The inline look first: a spinning wait's rounds mostly find nothing.
      if (ep->in_.has_data() || ep->in_.unpublished() != 0) n += ep->poll_in(sink);
      if (!ep->helping_.empty()) n += ep->help(sink);
    } else {
      compact = true;
    }
  }
  if (sockets || handshaking_ > 0 || ++calls_ % kSocketPassEvery == 0) n += socket_pass(sink);
  if (compact) {
    readers_.erase(std::remove_if(readers_.begin(), readers_.end(),
                                  [](ShmEndpoint* ep) { return !ep->in_attached_; }),
                   readers_.end());
  }
  if (!events_.empty()) n += deliver(sink);
  // A round that found work will likely find more (a read position to publish): say so
  // without looking; an empty round computes the hint.
  if (n > 0) {
    note_busy();
  } else {
    update_busy();
  }
  return n;
}

void ShmTransport::update_busy() {
  bool busy = armed_ || unprobed_ || !events_.empty() || puts_pending_ > 0 || handshaking_ > 0 ||
              !unfenced_.empty() || !pending_.empty();
  for (size_t i = 0; i < readers_.size() && !busy; ++i) {
    const ShmEndpoint* ep = readers_[i];
    busy = ep->in_attached_ && (!ep->helping_.empty() || ep->in_.unpublished() != 0);
  }
  busy_.store(busy, std::memory_order_relaxed);
}

void ShmTransport::add_probe(ShmEndpoint& ep) {
  size_t k = nprobes_.load(std::memory_order_relaxed);
  if (k >= probe_cap_) {  // cannot happen (one ring per peer); then the hint is always true
    unprobed_ = true;
    note_busy();
    return;
  }
  ep.in_.set_probe(&probes_[k]);
  nprobes_.store(k + 1, std::memory_order_release);
}

bool ShmTransport::maybe_pending() const noexcept {
  if (busy_.load(std::memory_order_relaxed)) return true;
  size_t n = nprobes_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i)
    if (probes_[i].ready()) return true;
  return false;
}

bool ShmTransport::arm() {
  if (!unfenced_.empty()) check_unfenced();
  if (!events_.empty()) return false;
  armed_ = true;
  note_busy();  // the next progress() clears the sleeping flags and looks at the sockets
  if (puts_pending_ > 0) {
    for (auto& [peer, ep] : eps_) {
      if (ep->puts_.empty() || ep->failed_) continue;
      const PutOp& op = ep->puts_.front();
      if (op.slot >= 0 && !op.notified) {
        if (!op.claims_done) return false;  // chunks left to claim
        if (!op.finisher) {
          // The receiver copies the last chunks and rings us when it is done.
          const PutSlot& ps = put_slots(ep->out_seg_.base())[op.slot];
          if (ps.done.load(std::memory_order_acquire) >= ps.chunks) return false;
          continue;
        }
      } else if (ep->cma_ && op.remaining > 0) {
        return false;  // a copy step is ready to run
      }
      size_t need = op.remaining > 0
                        ? std::min(op.remaining + sizeof(PutDataRecord), ep->out_.max_payload())
                        : sizeof(PutNotifyRecord);
      if (ep->out_.space_or_arm(need)) return false;
    }
  }
  for (ShmEndpoint* ep : readers_)
    if (ep->in_attached_ && !ep->helping_.empty()) return false;
  for (ShmEndpoint* ep : readers_) {
    // poll_in publishes the read position lazily: a sender waiting for space must see it.
    if (ep->in_attached_ && ep->in_.publish_head()) ep->ring_peer(ep->in_sock_.get());
  }
  for (ShmEndpoint* ep : readers_)
    if (ep->in_attached_) ep->in_.set_sleeping(true);
  for (ShmEndpoint* ep : readers_)
    if (ep->in_attached_ && ep->in_.has_data()) return false;
  return true;
}

}  // namespace tpcomm::transport::shm
