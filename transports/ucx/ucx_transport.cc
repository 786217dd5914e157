// The ucx transport: see ucx_transport.h and docs/transport.md.
#include "transports/ucx/ucx_transport.h"

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>

#include "core/log.h"
#include "tpcomm/error.hpp"
#include "transports/ucx/ucx_internal.h"

namespace tpcomm::ucx {

using transport::PostStatus;

void send_cb(void* /*request*/, ucs_status_t status, void* user) {
  Req* r = static_cast<Req*>(user);
  r->status = status;
  r->t->push_completed(r);
}

void recv_cb(void* /*request*/, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  Req* r = static_cast<Req*>(user);
  r->status = status;
  if (info != nullptr) r->info = *info;
  r->t->push_completed(r);
}

namespace {

void ep_error_cb(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* e = static_cast<UcxEndpoint*>(arg);
  e->transport().on_ep_error(*e, status);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Text that UCX writes to a FILE*, captured.
template <class F>
std::string capture(F&& f) {
  char* data = nullptr;
  size_t size = 0;
  FILE* fp = open_memstream(&data, &size);
  if (fp == nullptr) return "";
  f(fp);
  std::fclose(fp);
  std::string out(data ? data : "", size);
  std::free(data);
  return out;
}


}  // namespace

// ---- construction ------------------------------------------------------------------------

UcxTransport::UcxTransport(const transport::TransportContext& ctx, const Options& opt)
    : u_(load_ucp(opt.library)), opt_(opt), ctx_(ctx) {
  ucp_config_t* config = nullptr;
  ucs_status_t st = u_.ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK)
    throw NotSupportedError("ucx transport: ucp_config_read failed: " + status_text(u_, st));
  auto modify = [&](const char* name, const std::string& value, const char* var) {
    if (value.empty()) return;
    ucs_status_t s = u_.ucp_config_modify(config, name, value.c_str());
    if (s != UCS_OK) {
      u_.ucp_config_release(config);
      throw ConfigError(std::string(var) + "='" + value + "' was refused by UCX (UCX_" + name +
                        "): " + status_text(u_, s));
    }
  };
  modify("TLS", opt_.tls, "TPCOMM_UCX_TLS");
  modify("NET_DEVICES", opt_.net_devices, "TPCOMM_UCX_NET_DEVICES");
  std::string tls = "all";
  bool maybe_native = tls_may_be_native(
      capture([&](FILE* f) { u_.ucp_config_print(config, f, nullptr, UCS_CONFIG_PRINT_CONFIG); }),
      &tls);

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS |
                      UCP_PARAM_FIELD_TAG_SENDER_MASK;
  // Active messages for the protocol's RTS inside UCX's: received whenever tagged data is on
  // (a peer may send that form whatever this rank sends), sent with TPCOMM_UCX_TAGGED=auto.
  const bool want_am = opt_.tagged && opt_.put != PutMode::Rma;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP |
                    (want_am ? UCP_FEATURE_AM : 0);
  params.estimated_num_eps = static_cast<size_t>(std::max(1, ctx.world_size));
  params.tag_sender_mask = 0xffffffffull;
  st = u_.ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &context_);
  u_.ucp_config_release(config);
  if (st != UCS_OK)
    throw NotSupportedError("ucx transport: ucp_init failed (UCX_TLS=" + tls +
                            "): " + status_text(u_, st));

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENTS;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // the engine lock serialises every call
  wp.events =
      UCP_WAKEUP_RMA | UCP_WAKEUP_TAG_SEND | UCP_WAKEUP_TAG_RECV | UCP_WAKEUP_TX | UCP_WAKEUP_RX;
  st = u_.ucp_worker_create(context_, &wp, &worker_);
  if (st != UCS_OK) {
    u_.ucp_cleanup(context_);
    throw NotSupportedError("ucx transport: ucp_worker_create failed: " + status_text(u_, st));
  }
  if (want_am) {
    ucp_am_handler_param_t hp{};
    hp.field_mask =
        UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = kAmTaggedId;
    hp.cb = am_tagged_cb;
    hp.arg = this;
    ucp_worker_attr_t wa{};
    wa.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
    st = u_.ucp_worker_set_am_recv_handler(worker_, &hp);
    if (st == UCS_OK) st = u_.ucp_worker_query(worker_, &wa);
    if (st == UCS_OK) {
      max_am_header_ = wa.max_am_header;
    } else {
      TPLOG(WARN, UCX) << "rank " << ctx.rank << ": no UCX active-message handler ("
                       << status_text(u_, st) << "); the RTS goes as a message of its own";
    }
  }
  st = u_.ucp_worker_get_efd(worker_, &efd_);
  if (st != UCS_OK) {
    TPLOG(INFO, UCX) << "rank " << ctx.rank << ": ucp_worker_get_efd failed ("
                     << status_text(u_, st) << "); the engine polls instead";
    efd_ = -1;
  }
  ucp_address_t* wa = nullptr;
  size_t wa_len = 0;
  st = u_.ucp_worker_get_address(worker_, &wa, &wa_len);
  if (st != UCS_OK) {
    u_.ucp_worker_destroy(worker_);
    u_.ucp_cleanup(context_);
    throw NotSupportedError("ucx transport: ucp_worker_get_address failed: " + status_text(u_, st));
  }
  job_hash_ = fnv1a(ctx.job_id);
  address_.resize(kAddrHeader + wa_len);
  uint8_t* p = address_.data();
  std::memcpy(p, &kAddrMagic, 4);
  std::memcpy(p + 4, &kAddrVersion, 2);
  uint16_t flags = max_am_header_ > 0 ? kAddrTakesTaggedAm : 0;
  std::memcpy(p + 6, &flags, 2);
  int32_t rank = ctx.rank;
  uint32_t pid = static_cast<uint32_t>(getpid());
  host_hash_ = fnv1a(ctx.host_id);
  struct stat ns {};
  if (stat("/proc/self/ns/pid", &ns) == 0) pidns_ = ns.st_ino;
  std::memcpy(p + 8, &rank, 4);
  std::memcpy(p + 12, &pid, 4);
  std::memcpy(p + 16, &job_hash_, 8);
  std::memcpy(p + 24, &host_hash_, 8);
  std::memcpy(p + 32, &pidns_, 8);
  std::memcpy(p + kAddrHeader, wa, wa_len);
  u_.ucp_worker_release_address(worker_, wa);

  caps_.reach = transport::Reach::Network;
  caps_.native_put = opt_.put == PutMode::Rma || (opt_.put == PutMode::Auto && maybe_native);
  caps_.native_get = false;
  caps_.max_message = opt_.max_message;
  // UCX matches tagged messages itself: the protocol's rendezvous sends the data with its RTS
  // (no CTS round trip) and the receiver takes it with ucp_tag_recv_nbx. Not when put is
  // forced to ucp_put_nbx (TPCOMM_UCX_PUT=rma): then the protocol's puts are what is asked for.
  caps_.tagged_data = opt_.tagged && opt_.put != PutMode::Rma;
  // Measured: over UCX's tcp the CTS path moves 2-16 MiB 10-20% faster in the same run (the
  // cause is not known); at 1 MiB the tagged path is faster.
  caps_.tagged_data_max = opt_.tagged_max;
  // The RTS inside UCX's rendezvous RTS: one message per transfer instead of two (to each peer
  // that takes it; to others the endpoint sends the two).
  caps_.tagged_data_with_message =
      caps_.tagged_data && opt_.tagged_am && max_am_header_ >= kAmTaggedHdr + 64;
  caps_.max_put = SIZE_MAX;
  caps_.recv_slots = 0;  // UCX does its own flow control; too many requests -> NoResource
  caps_.rndv_threshold = opt_.rndv_threshold;
  caps_.latency_us = maybe_native ? 1.0 : 15.0;
  caps_.bandwidth_gbps = maybe_native ? 10.0 : 3.0;
  caps_.progress_is_syscall = tls_is_sockets_only(tls);

  // The pool's receives are live requests too: a limit below them plus a few would refuse
  // every send.
  max_live_ = std::max(opt_.max_requests, static_cast<size_t>(opt_.recv_depth) + 8);
  if (max_live_ != opt_.max_requests) {
    TPLOG(WARN, UCX) << "TPCOMM_UCX_MAX_REQUESTS=" << opt_.max_requests << " is below the "
                     << opt_.recv_depth << " pool receives plus 8; using " << max_live_;
  }
  pool_buf_.assign(static_cast<size_t>(opt_.recv_depth), std::vector<uint8_t>(opt_.max_message));
  for (int i = 0; i < opt_.recv_depth; ++i) post_pool_recv(i);
  TPLOG(INFO, UCX) << "rank " << ctx.rank << ": UCX " << u_.ucp_get_version_string()
                   << " started (UCX_TLS=" << tls << ", worker address " << wa_len
                   << " bytes, event fd " << efd_ << ")";
}

void UcxTransport::drain_completed() {
  for (int i = 0; i < 64 && u_.ucp_worker_progress(worker_) != 0; ++i) {
  }
  std::vector<Req*> done;
  done.swap(completed_);
  for (Req* r : done) {
    if (r->ucx) u_.ucp_request_free(r->ucx);
    if (r->kind == Req::TaggedRts && r->addr)  // a descriptor not held yet
      u_.ucp_am_data_release(worker_, reinterpret_cast<void*>(r->addr));
    live_.erase(r);
    delete r;
  }
}

void UcxTransport::close_endpoints() {
  // Close endpoints: flush what was sent, force where the peer is gone. An eager send reported
  // complete may still sit in UCX: the flush is what delivers it, so it is waited for while
  // the peer lives (on a starved machine it can take more than 3 s, and a purge would lose
  // messages the peer is waiting for), up to TPCOMM_UCX_CLOSE_TIMEOUT, and
  // given up at once for a peer that exits or fails meanwhile.
  //
  // Work on the user's memory goes first: the engine has already failed the operations it
  // served (their buffers may be freed as soon as their Works return), so receives into user
  // memory are cancelled before anything progresses UCX again, and an endpoint with a send
  // still reading user memory (tagged data, or an RMA put awaiting its flush) is closed by
  // force rather than flushed: the flush would keep reading that memory for as long as it
  // waits. So is one with a receive that could not be cancelled (UCX already matched it and
  // moves its data).
  for (Req* r : live_)
    if (r->ucx && (r->kind == Req::DataRecv || r->kind == Req::Discard))
      u_.ucp_request_cancel(worker_, r->ucx);
  // Tagged data held for receives that will not come back to UCX now (a rendezvous: its ATS
  // completes the sender's send, as for data the protocol drops), before the endpoints close.
  release_held_of(-1);
  drain_completed();
  std::unordered_set<int> force;
  for (Req* r : live_)
    if (r->kind == Req::PutData || r->kind == Req::Flush || r->kind == Req::DataRecv)
      force.insert(r->peer);
  struct Closing {
    void* req;
    UcxEndpoint* ep;
  };
  std::vector<Closing> closing;
  for (auto& [peer, e] : eps_) {
    for (auto& [blob, rk] : e->rkeys_)
      if (rk.rkey) u_.ucp_rkey_destroy(rk.rkey);
    e->rkeys_.clear();
    e->mapped_keys_ = 0;
    if (e->ep_ == nullptr) continue;
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = e->failed_ || force.count(peer) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void* req = u_.ucp_ep_close_nbx(e->ep_, &prm);
    if (UCS_PTR_IS_PTR(req)) closing.push_back({req, e.get()});
  }
  auto start = std::chrono::steady_clock::now();
  const auto wait = opt_.close_timeout;
  const auto warn_after = std::min<std::chrono::milliseconds>(kCloseWarn, wait / 2);
  auto ms = [](std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; };
  bool warned = false;
  while (!closing.empty() && std::chrono::steady_clock::now() - start < wait) {
    drain_completed();
    next_pid_check_ms_ = 0;
    check_pids();  // marks exited same-host peers failed (errors_ is not reported any more)
    for (size_t i = 0; i < closing.size();) {
      bool done = u_.ucp_request_check_status(closing[i].req) != UCS_INPROGRESS;
      // A failed peer's close is released unfinished and left to ucp_worker_destroy, which
      // purges what the endpoint holds (a close request it finds unreleased is a UCX assert).
      if (done || closing[i].ep->failed_) {
        u_.ucp_request_free(closing[i].req);
        closing[i] = closing.back();
        closing.pop_back();
      } else {
        ++i;
      }
    }
    if (!warned && !closing.empty() && std::chrono::steady_clock::now() - start > warn_after) {
      warned = true;
      TPLOG(WARN, UCX) << "rank " << ctx_.rank << ": " << closing.size()
                       << " UCX endpoint(s) still flushing after " << ms(warn_after)
                       << "; waiting up to " << ms(wait)
                       << " (TPCOMM_UCX_CLOSE_TIMEOUT) while the peers live";
    }
    if (closing.empty()) break;
    // Yield while flushes move; a long wait (a stopped peer) sleeps instead of spinning.
    if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(20))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!closing.empty()) {
    TPLOG(WARN, UCX) << "rank " << ctx_.rank << ": " << closing.size()
                     << " UCX endpoint(s) did not close within " << ms(wait)
                     << " (TPCOMM_UCX_CLOSE_TIMEOUT); messages still queued to them are dropped";
    for (Closing& c : closing) u_.ucp_request_free(c.req);
  }
  for (auto& [peer, e] : eps_)
    if (e->pidfd_ >= 0) {
      ::close(e->pidfd_);
      e->pidfd_ = -1;
    }
}

UcxTransport::~UcxTransport() {
  closing_ = true;
  close_endpoints();
  // Cancel the pool's receives (close_endpoints cancelled those into user memory) and let
  // UCX report them.
  for (Req* r : live_)
    if (r->ucx && r->kind == Req::Pool) u_.ucp_request_cancel(worker_, r->ucx);
  auto cancel_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!live_.empty() && std::chrono::steady_clock::now() < cancel_deadline) drain_completed();
  drain_completed();
  // The requests still live are freed only after the worker: ucp_worker_destroy purges the
  // sends still pending on endpoints that did not close (a peer gone, the close wait spent)
  // and calls their callbacks, which write into the Req (deleting the Reqs first would let
  // send_cb write into freed memory: P2P/Semantics.TenThousandOutstandingSmallIsends/ucx).
  u_.ucp_worker_destroy(worker_);
  worker_ = nullptr;
  for (Req* r : live_) delete r;  // no callbacks after the worker is gone
  live_.clear();
  completed_.clear();
  for (Req* r : free_) delete r;
  free_.clear();
  u_.ucp_cleanup(context_);
}

// ---- requests ----------------------------------------------------------------------------

Req* UcxTransport::new_req() {
  Req* r;
  if (!free_.empty()) {
    r = free_.back();
    free_.pop_back();
    std::vector<uint8_t> keep;
    keep.swap(r->buf);
    *r = Req{};
    r->buf.swap(keep);
    r->buf.clear();
  } else {
    r = new Req;
  }
  r->t = this;
  live_.insert(r);
  return r;
}

void UcxTransport::release(Req* r) {
  live_.erase(r);
  if (free_.size() < 256 && r->buf.capacity() <= (1u << 20))
    free_.push_back(r);
  else
    delete r;
}

std::string UcxTransport::peer_text(int peer) const {
  return "rank " + std::to_string(peer) + " (ucx, job '" + ctx_.job_id + "')";
}

void UcxTransport::post_pool_recv(int index) {
  Req* r = new_req();
  r->kind = Req::Pool;
  r->index = index;
  ucp_request_param_t prm{};
  // UCP_OP_ATTR_FLAG_NO_IMM_CMPL: UCX always reports through the callback, with the sender tag
  // and length (UCX 1.13 left the length unset in recv_info on an immediate completion).
  prm.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  prm.cb.recv = recv_cb;
  prm.user_data = r;
  auto& b = pool_buf_[static_cast<size_t>(index)];
  void* req = u_.ucp_tag_recv_nbx(worker_, b.data(), b.size(), kPoolBit, kPoolBit, &prm);
  if (UCS_PTR_IS_ERR(req)) {
    TPLOG(WARN, UCX) << "rank " << ctx_.rank
                     << ": cannot post a UCX receive: " << status_text(u_, UCS_PTR_STATUS(req));
    release(r);
  } else if (req == nullptr) {
    release(r);  // not expected with UCP_OP_ATTR_FLAG_NO_IMM_CMPL
  } else {
    r->ucx = req;
  }
}

void UcxTransport::on_ep_error(UcxEndpoint& e, ucs_status_t status) {
  if (e.failed_) return;
  e.failed_ = true;
  errors_.emplace_back(e.peer(), "ucx: the connection to rank " + std::to_string(e.peer()) +
                                     " failed: " + status_text(u_, status) +
                                     " (the peer exited or its host is unreachable)");
}

PostStatus UcxTransport::send_tagged(UcxEndpoint& e, uint64_t tag, std::span<const iovec> iov,
                                     Req* r) {
  if (e.failed_) {
    if (r) release(r);
    return PostStatus::PeerFailed;
  }
  size_t total = 0;
  for (const iovec& v : iov) total += v.iov_len;
  // Buffered semantics: UCX 1.13 may keep any send pending (it ignores
  // UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL for tagged sends), so the bytes are copied first into a
  // recycled request buffer.
  if (buffered_bytes_ + total > kMaxBuffered || live_.size() >= max_live_) {
    if (r) release(r);
    return PostStatus::NoResource;
  }
  if (r == nullptr) {
    r = new_req();
    r->kind = Req::Msg;
  }
  r->buf.resize(total);
  size_t off = 0;
  for (const iovec& v : iov) {
    if (v.iov_len) std::memcpy(r->buf.data() + off, v.iov_base, v.iov_len);
    off += v.iov_len;
  }
  buffered_bytes_ += total;
  ucp_request_param_t prm{};
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  prm.cb.send = send_cb;
  prm.user_data = r;
  void* req = u_.ucp_tag_send_nbx(e.ep_, r->buf.data(), total, tag, &prm);
  if (req == nullptr) {
    completed_.push_back(r);
  } else if (UCS_PTR_IS_ERR(req)) {
    buffered_bytes_ -= total;
    on_ep_error(e, UCS_PTR_STATUS(req));
    release(r);
    return PostStatus::PeerFailed;
  } else {
    r->ucx = req;
  }
  return PostStatus::Ok;
}

// ---- endpoints ---------------------------------------------------------------------------

UcxTransport& UcxEndpoint::transport() { return t_; }

transport::Endpoint& UcxTransport::connect(int peer, std::span<const uint8_t> a,
                                           std::chrono::steady_clock::time_point /*deadline*/) {
  auto it = eps_.find(peer);
  if (it != eps_.end()) return *it->second;
  uint32_t magic = 0;
  uint16_t version = 0, flags = 0;
  int32_t rank = -1;
  uint32_t pid = 0;
  uint64_t job = 0, host = 0, pidns = 0;
  if (a.size() > kAddrHeader) {
    std::memcpy(&magic, a.data(), 4);
    std::memcpy(&version, a.data() + 4, 2);
    std::memcpy(&flags, a.data() + 6, 2);
    std::memcpy(&rank, a.data() + 8, 4);
    std::memcpy(&pid, a.data() + 12, 4);
    std::memcpy(&job, a.data() + 16, 8);
    std::memcpy(&host, a.data() + 24, 8);
    std::memcpy(&pidns, a.data() + 32, 8);
  }
  if (magic != kAddrMagic || version != kAddrVersion)
    throw TransportError("ucx transport: the address published by rank " + std::to_string(peer) +
                         " is not a tpcomm UCX address (" + std::to_string(a.size()) +
                         " bytes, bad magic or version); is it running the same tpcomm?");
  if (rank != peer || job != job_hash_)
    throw TransportError("ucx transport: the address published for rank " + std::to_string(peer) +
                         " belongs to rank " + std::to_string(rank) +
                         (job != job_hash_ ? " of another job" : "") + " (job '" + ctx_.job_id +
                         "'); a stale store?");
  auto e = std::make_unique<UcxEndpoint>(*this, peer);
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(a.data() + kAddrHeader);
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = ep_error_cb;
  ep.err_handler.arg = e.get();
  bool local = host == host_hash_ && pidns == pidns_ && pidns != 0 && pid != 0;
  // A peer on this host (same pid namespace) is watched through its process, which also
  // covers UCX's shared-memory lanes: UCX 1.13 has no peer-failure support there and refuses
  // (and prints to stdout about) UCP_ERR_HANDLING_MODE_PEER. Remote peers use UCX's.
  if (local) ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  ucs_status_t st = u_.ucp_ep_create(worker_, &ep, &e->ep_);
  bool peer_mode = ep.err_mode == UCP_ERR_HANDLING_MODE_PEER;
  if (st == UCS_ERR_UNREACHABLE && peer_mode) {
    // A remote peer UCX cannot reach with peer-failure support: connect without it.
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    st = u_.ucp_ep_create(worker_, &ep, &e->ep_);
    peer_mode = false;
  }
  if (!peer_mode && st == UCS_OK) {
    if (local) {
      e->pid_ = static_cast<int>(pid);
#ifdef SYS_pidfd_open
      e->pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, e->pid_, 0));
#endif
    } else {
      TPLOG(WARN, UCX) << "rank " << ctx_.rank << ": UCX's lanes to rank " << peer
                       << " have no peer-failure detection and it runs elsewhere; its death "
                          "will show only as a timeout";
    }
  }
  if (st != UCS_OK)
    throw TransportError("ucx transport: ucp_ep_create to rank " + std::to_string(peer) +
                         " failed: " + status_text(u_, st) +
                         " (no common UCX transport? check UCX_TLS/TPCOMM_UCX_TLS on both)");
  // Which put is native here. UCX prints an RMA ("put[...]") protocol line only when a
  // transport lane does RMA itself; without one (UCX's tcp) put is emulated over active
  // messages. Shared-memory lanes (posix, sysv) put only into memory UCX allocated itself;
  // into user buffers registered with ucp_mem_map UCX falls back to that emulation too
  // (measured: 0.1-0.6 GB/s against 4-5 GB/s for a tagged message, docs/transport.md). So
  // auto uses ucp_put_nbx only over RDMA lanes (rc, dc, ud, gga), and tagged messages,
  // which UCX moves by zero-copy rendezvous (cma, RDMA read or tcp zcopy), elsewhere.
  std::string info = capture([&](FILE* f) { u_.ucp_ep_print_info(e->ep_, f); });
  bool rma_lane = info.find("put[") != std::string::npos;
  std::string lanes;
  bool rdma = false;
  for (size_t pos = info.find("lane["); pos != std::string::npos;
       pos = info.find("lane[", pos + 1)) {
    size_t colon = info.find(':', pos), end = info.find("md[", pos);
    if (colon == std::string::npos || end == std::string::npos) break;
    std::string l = info.substr(colon + 1, end - colon - 1);
    while (!l.empty() && l.back() == ' ') l.pop_back();
    while (!l.empty() && l.front() == ' ') l.erase(0, 1);
    for (const char* t : {"rc_", "dc_", "ud_", "rc/", "dc/", "ud/", "gga"})
      if (l.find(t) != std::string::npos) rdma = true;
    lanes += (lanes.empty() ? "" : ",") + l;
  }
  e->rma_ = opt_.put == PutMode::Rma || (opt_.put == PutMode::Auto && rma_lane && rdma);
  e->am_ = caps_.tagged_data_with_message && (flags & kAddrTakesTaggedAm) != 0;
  if (e->rma_) ++rma_endpoints_;
  e->info_ = lanes;
  TPLOG(INFO, UCX) << "rank " << ctx_.rank << ": endpoint to rank " << peer << " over " << lanes
                   << "; put " << (e->rma_ ? "by ucp_put_nbx" : "as tagged messages")
                   << (!rma_lane ? " (UCX would emulate RMA)"
                       : rdma    ? " (RDMA lane)"
                                 : " (UCX's shared-memory RMA reaches only its own memory)")
                   << (!caps_.tagged_data ? ""
                       : e->am_           ? "; tagged data with its RTS in one active message"
                                          : "; tagged data after its RTS (two messages)")
                   << (peer_mode ? "; failures from UCX" : "; failures by watching pid ")
                   << (peer_mode ? "" : std::to_string(e->pid_));
  return *eps_.emplace(peer, std::move(e)).first->second;
}

// ---- progress ----------------------------------------------------------------------------

void UcxTransport::handle_put_header(int peer, const uint8_t* p, size_t n,
                                     transport::EventSink& sink, int& events) {
  uint64_t to = 0, len = 0;
  uint32_t imm = 0, id = 0;
  if (n == kPutHdrSize) {
    std::memcpy(&to, p, 8);
    std::memcpy(&len, p + 8, 8);
    std::memcpy(&imm, p + 16, 4);
    std::memcpy(&id, p + 20, 4);
  }
  bool inside = false;
  for (auto& [start, end] : regions_)
    if (start <= to && len <= end - start && to - start <= end - start - len) inside = true;
  if (n != kPutHdrSize || (len > 0 && !inside)) {
    errors_.emplace_back(peer, "ucx: rank " + std::to_string(peer) + " sent a put header of " +
                                   std::to_string(n) + " bytes for " + std::to_string(len) +
                                   " bytes at 0x" + std::to_string(to) +
                                   " outside any registered region; link closed");
    return;
  }
  if (len == 0) {
    sink.on_put_arrived(peer, imm);
    ++events;
    return;
  }
  post_data_recv(peer, imm, to, len, data_tag(id, peer));
}

Req* UcxTransport::new_data_recv(int peer, uint32_t imm, uintptr_t to, size_t len) {
  Req* r = new_req();
  r->kind = Req::DataRecv;
  ++transfers_;
  r->peer = peer;
  r->imm = imm;
  r->addr = to;
  r->expect = len;
  r->info.length = len;  // in case of an immediate completion
  return r;
}

void UcxTransport::post_data_recv(int peer, uint32_t imm, uintptr_t to, size_t len, uint64_t tag) {
  Req* r = new_data_recv(peer, imm, to, len);
  ucp_request_param_t prm{};
  prm.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  prm.cb.recv = recv_cb;
  prm.user_data = r;
  void* req = u_.ucp_tag_recv_nbx(worker_, reinterpret_cast<void*>(to), len, tag, ~0ull, &prm);
  if (UCS_PTR_IS_ERR(req)) r->status = UCS_PTR_STATUS(req);
  if (req == nullptr || UCS_PTR_IS_ERR(req))
    completed_.push_back(r);
  else
    r->ucx = req;
}

void UcxTransport::finish(Req* r, transport::EventSink& sink, int& events) {
  if (r->ucx) {
    u_.ucp_request_free(r->ucx);
    r->ucx = nullptr;
  }
  bool ok = r->status == UCS_OK;
  switch (r->kind) {
    case Req::Pool: {
      int index = r->index;
      if (r->status == UCS_ERR_CANCELED) break;
      int peer = static_cast<int>(r->info.sender_tag & 0xffffffffu);
      if (!ok) {
        TPLOG(WARN, UCX) << "rank " << ctx_.rank << ": a UCX receive from rank " << peer
                         << " failed: " << status_text(u_, r->status);
        if (r->status == UCS_ERR_MESSAGE_TRUNCATED)
          errors_.emplace_back(peer, "ucx: rank " + std::to_string(peer) +
                                         " sent a message larger than max_message " +
                                         std::to_string(opt_.max_message));
      } else if (!reported_.count(peer)) {
        uint64_t kind = (r->info.sender_tag >> 60) & 7;
        const uint8_t* data = pool_buf_[static_cast<size_t>(index)].data();
        size_t n = r->info.length;
        if (kind == kKindMsg) {
          sink.on_message(peer, {data, n});
          ++events;
        } else if (kind == kKindPutHdr) {
          handle_put_header(peer, data, n, sink, events);
        } else if (kind == kKindNotify && n == 4) {
          uint32_t imm = 0;
          std::memcpy(&imm, data, 4);
          sink.on_put_arrived(peer, imm);
          ++events;
        } else {
          errors_.emplace_back(peer, "ucx: rank " + std::to_string(peer) +
                                         " sent an unknown message kind " + std::to_string(kind));
        }
      }
      release(r);
      if (!closing_) post_pool_recv(index);
      return;
    }
    case Req::Msg:
      buffered_bytes_ -= r->buf.size();
      break;
    case Req::PutHdr:
      buffered_bytes_ -= r->buf.size();
      if (r->has_cookie) {
        sink.on_put_done(r->cookie, ok);
        ++events;
      }
      break;
    case Req::PutData:
      --transfers_;
      sink.on_put_done(r->cookie, ok);
      ++events;
      break;
    case Req::Flush: {
      auto it = eps_.find(r->peer);
      if (ok && it != eps_.end()) {
        r->kind = Req::Notify;
        r->status = UCS_OK;
        uint32_t imm = r->imm;
        uint64_t cookie = r->cookie;
        iovec v{&imm, 4};
        if (send_tagged(*it->second, pool_tag(kKindNotify, ctx_.rank), {&v, 1}, r) !=
            PostStatus::Ok) {
          --it->second->rma_in_flight_;
          sink.on_put_done(cookie, false);
          ++events;
        }
        return;  // r lives on as the notification (or was released)
      }
      if (it != eps_.end()) --it->second->rma_in_flight_;
      sink.on_put_done(r->cookie, false);
      ++events;
      break;
    }
    case Req::Notify: {
      buffered_bytes_ -= r->buf.size();
      auto it = eps_.find(r->peer);
      if (it != eps_.end()) --it->second->rma_in_flight_;
      sink.on_put_done(r->cookie, ok);
      ++events;
      break;
    }
    case Req::Discard:
      break;
    case Req::TaggedRts:
      hold_tagged(r, sink, events);
      break;
    case Req::DataRecv:
      --transfers_;
      if (r->status == UCS_ERR_CANCELED) break;
      if (ok && r->info.length == r->expect) {
        if (!reported_.count(r->peer)) {
          sink.on_put_arrived(r->peer, r->imm);
          ++events;
        }
      } else {
        errors_.emplace_back(r->peer, "ucx: put data from rank " + std::to_string(r->peer) +
                                          " failed: " +
                                          (ok ? "received " + std::to_string(r->info.length) +
                                                    " of " + std::to_string(r->expect) + " bytes"
                                              : status_text(u_, r->status)));
      }
      break;
  }
  release(r);
}

void UcxTransport::check_pids() {
  // Called from every idle progress call and every 16th busy one: the coarse clock (a few ns,
  // ~4 ms resolution) keeps a full clock read off the busy-poll path; the check itself runs
  // every 50 ms.
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  int64_t now = static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
  if (now < next_pid_check_ms_) return;
  next_pid_check_ms_ = now + 50;
  for (auto& [peer, e] : eps_) {
    if (e->pid_ <= 0 || e->failed_) continue;
    bool dead;
    if (e->pidfd_ >= 0) {
      pollfd pf{e->pidfd_, POLLIN, 0};
      dead = ::poll(&pf, 1, 0) > 0;
    } else {
      dead = ::kill(e->pid_, 0) != 0 && errno == ESRCH;
    }
    if (dead) {
      e->failed_ = true;
      errors_.emplace_back(peer, "ucx: rank " + std::to_string(peer) + " (pid " +
                                     std::to_string(e->pid_) +
                                     " on this host) exited; its shared-memory link is gone");
    }
  }
}

int UcxTransport::progress(transport::EventSink& sink) {
  if (closing_) return 0;
  unsigned moved = 0;
  // Up to 16 rounds while UCX moves something, but back to the engine as soon as a callback
  // left it work (a completion, an arrived RTS, an error): a rendezvous' answer (UCX's RTR,
  // sent from ucp_am_recv_data_nbx) or the next send waits for the engine, and more rounds of a
  // busy tcp stream before it would delay them by tens of microseconds.
  for (int i = 0; i < 16; ++i) {
    unsigned n = u_.ucp_worker_progress(worker_);
    moved += n;
    if (n == 0 || !completed_.empty() || !errors_.empty()) break;
  }
  // No clock on the busy path (a round of a tcp stream is a few microseconds, and clock reads
  // would be a visible share of it): moving() notices moved_rounds_ change, and the pid watch is
  // looked at on every idle call but only every 16th one that moved something.
  if (moved != 0) {
    if (transfers_ > 0) ++moved_rounds_;
    if ((++busy_calls_ & 15) == 0) check_pids();
  } else {
    check_pids();
  }
  int events = 0;
  std::vector<Req*>& done = done_scratch_;  // kept: no allocation per progress call
  while (!completed_.empty() || !errors_.empty()) {
    done.clear();
    done.swap(completed_);
    for (Req* r : done) finish(r, sink, events);
    done.clear();
    while (!errors_.empty()) {
      auto [peer, reason] = errors_.front();
      errors_.pop_front();
      auto it = eps_.find(peer);
      if (it != eps_.end()) it->second->failed_ = true;
      if (!reported_.insert(peer).second) continue;
      // Receives of puts from the dead peer will never complete: withdraw them, and give
      // back the data it sent that no receive took yet.
      for (Req* r : live_)
        if ((r->kind == Req::DataRecv || r->kind == Req::Discard) && r->peer == peer && r->ucx)
          u_.ucp_request_cancel(worker_, r->ucx);
      release_held_of(peer);
      TPLOG(INFO, UCX) << "rank " << ctx_.rank << ": " << reason;
      sink.on_peer_error(peer, reason);
      ++events;
    }
  }
  return events;
}

bool UcxTransport::moving(MoveWatch& w) {
  if (transfers_ == 0) return false;
  auto now = std::chrono::steady_clock::now();
  if (moved_rounds_ != w.seen) {
    w.seen = moved_rounds_;
    w.at = now;
    return true;
  }
  return now - w.at < kBusyPoll;
}

bool UcxTransport::transferring() { return moving(wait_watch_); }

bool UcxTransport::arm() {
  if (!completed_.empty() || !errors_.empty()) return false;
  // A rendezvous transfer that UCX is moving right now (tcp: chunk after chunk through
  // ucp_worker_progress) is polled, not slept on: a wake-up per chunk through the event fd
  // costs ~20% of large-message bandwidth over tcp. Once UCX has moved
  // nothing for kBusyPoll (the peer copies, or is descheduled), sleep as usual.
  if (moving(arm_watch_)) return false;
  if (efd_ < 0) return true;
  ucs_status_t st = u_.ucp_worker_arm(worker_);
  if (st == UCS_ERR_BUSY) return false;
  if (st != UCS_OK) {
    TPLOG(WARN, UCX) << "rank " << ctx_.rank << ": ucp_worker_arm: " << status_text(u_, st);
  }
  return true;
}

}  // namespace tpcomm::ucx
