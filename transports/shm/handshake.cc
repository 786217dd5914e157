// shm transport: the socket side of connections. Accepting, the HELLO/ACK/REFUSE handshake
// that hands over each ring, doorbells, goodbyes, ends of stream and connection deadlines.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/log.h"
#include "transports/shm/device.h"
#include "transports/shm/segment.h"

namespace tpcomm::transport::shm {

namespace {

using Clock = std::chrono::steady_clock;

// An accepted socket that sends no HELLO within this time is dropped.
constexpr auto kPendingTimeout = std::chrono::seconds(60);

}  // namespace

int ShmTransport::socket_pass(EventSink& sink) {
  int n = 0;
  epoll_event evs[32];
  int got = ::epoll_wait(epoll_.get(), evs, 32, 0);
  for (int i = 0; i < got; ++i) {
    uint64_t tag = evs[i].data.u64;
    uint64_t kind = tag & kTagMask;
    uint64_t low = tag & ~kTagMask;
    if (kind == kTagListener) {
      accept_all();
    } else if (kind == kTagPending) {
      read_pending(low);
    } else if (kind == kTagIn || kind == kTagOut || kind == kTagPid) {
      auto it = eps_.find(static_cast<int>(low));
      if (it == eps_.end() || it->second->failed_) continue;
      if (kind == kTagIn) {
        read_in(*it->second, sink);
      } else if (kind == kTagOut) {
        read_out(*it->second, sink);
      } else {
        peer_closed(*it->second, sink, "its process exited");
      }
    }
  }
  check_deadlines();
  return n;
}

void ShmTransport::accept_all() {
  for (;;) {
    int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN) {
        TPLOG(WARN, SHM) << "shm: rank " << ctx_.rank << ": accept on @" << socket_name_ << ": "
                         << std::strerror(errno);
      }
      return;
    }
    uint64_t id = next_pending_++;
    Pending& p = pending_[id];
    p.sock = net::Fd(fd);
    p.since = Clock::now();
    watch(fd, kTagPending | id);
  }
}

void ShmTransport::refuse(int sock, int peer, const std::string& reason) {
  TPLOG(WARN, SHM) << "shm: rank " << ctx_.rank << " refused a connection"
                   << (peer >= 0 ? " from rank " + std::to_string(peer) : std::string()) << ": "
                   << reason;
  Control c;
  c.type = ControlType::Refuse;
  c.src_rank = ctx_.rank;
  c.dst_rank = peer;
  c.reason = "rank " + std::to_string(ctx_.rank) + " refused the shm connection: " + reason;
  (void)send_message(sock, encode_control(c));
}

void ShmTransport::read_pending(uint64_t id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  uint8_t buf[kMaxControl];
  int fd = -1;
  ssize_t n = recv_message(p.sock.get(), {buf, sizeof buf}, &fd);
  if (n == -EAGAIN) return;
  if (n <= 0) {  // closed before its HELLO
    if (fd >= 0) ::close(fd);
    pending_.erase(it);
    return;
  }
  Control c;
  std::string err = n > static_cast<ssize_t>(sizeof buf)
                        ? "oversized control message"
                        : decode_control({buf, static_cast<size_t>(n)}, &c);
  if (err.empty() && c.type != ControlType::Hello) err = "expected HELLO first";
  if (!err.empty()) {
    refuse(p.sock.get(), -1, err);
    if (fd >= 0) ::close(fd);
    pending_.erase(it);
    return;
  }
  handle_hello(id, p, c, fd);  // takes fd, erases the pending entry
}

void ShmTransport::handle_hello(uint64_t id, Pending& p, const Control& c, int fd) {
  net::Fd seg_fd(fd);
  net::Fd sock = std::move(p.sock);
  pending_.erase(id);
  int src = c.src_rank;
  std::string why;
  if (c.job_id != ctx_.job_id) {
    why = "job id '" + c.job_id + "' differs from this job's '" + ctx_.job_id +
          "' (a rank of another job, or TPCOMM_JOB_ID set differently)";
  } else if (c.dst_rank != ctx_.rank) {
    why = "it is addressed to rank " + std::to_string(c.dst_rank) + ", this is rank " +
          std::to_string(ctx_.rank);
  } else if (c.world_size != ctx_.world_size) {
    why = "world size " + std::to_string(c.world_size) + " differs from this job's " +
          std::to_string(ctx_.world_size);
  } else if (src < 0 || src >= ctx_.world_size) {
    why = "source rank " + std::to_string(src) + " is outside world size " +
          std::to_string(ctx_.world_size);
  } else if (!seg_fd.valid()) {
    why = "no ring segment came with the handshake";
  } else if (c.ring_bytes < 4096 || c.ring_bytes % kLine != 0 ||
             c.ring_bytes > (uint64_t{1} << 40) /* no overflow below */ ||
             c.segment_bytes < ring_segment_bytes(c.ring_bytes) ||
             c.segment_bytes - ring_segment_bytes(c.ring_bytes) > kMaxStageBytes) {
    why = "bad ring geometry (ring " + std::to_string(c.ring_bytes) + " bytes, segment " +
          std::to_string(c.segment_bytes) + ")";
  }
  auto existing = eps_.find(src);
  if (why.empty() && existing != eps_.end() &&
      (existing->second->in_attached_ || existing->second->failed_)) {
    why = "rank " + std::to_string(src) + " is already connected (pid " +
          std::to_string(existing->second->info_.pid) + "); a second HELLO from pid " +
          std::to_string(c.from.pid) + " means two processes claim that rank";
  }
  if (!why.empty()) {
    refuse(sock.get(), src, why);
    return;
  }
  ShmEndpoint& ep = make_endpoint(src);
  std::string what =
      "the ring from rank " + std::to_string(src) + " (pid " + std::to_string(c.from.pid) + ")";
  try {
    // The sender's staging area (after its ring) may still be a hole: not mapped in now.
    ep.in_seg_ =
        Segment::attach(seg_fd.release(), c.segment_bytes, what, ring_segment_bytes(c.ring_bytes));
    why = ep.in_.attach(ep.in_seg_.base(), ep.in_seg_.size(), src, ctx_.rank);
  } catch (const Error& e) {
    why = e.what();
  }
  if (!why.empty()) {
    refuse(sock.get(), src, what + ": " + why);
    if (!ep.in_attached_ && ep.out_state_ == ShmEndpoint::OutState::None) eps_.erase(src);
    return;
  }
  if (!ep.have_info_) {
    ep.info_ = c.from;
    ep.have_info_ = true;
  }
  ep.in_sock_ = std::move(sock);
  ep.in_attached_ = true;
  readers_.push_back(&ep);
  add_probe(ep);
  watch(ep.in_sock_.get(), kTagIn | static_cast<uint32_t>(src), /*retag=*/true);
  Control ack;
  ack.type = ControlType::Ack;
  ack.src_rank = ctx_.rank;
  ack.dst_rank = src;
  (void)send_message(ep.in_sock_.get(), encode_control(ack));
  if (ep.out_state_ == ShmEndpoint::OutState::None) {
    // The peer connected first: open our direction now, so that it can hear from us.
    try {
      start_out(ep, Clock::now() + ctx_.timeout);
      try_connect(ep);
    } catch (const Error& e) {
      // Our ring does not fit (/dev/shm too small): tell the peer why, and fail here too.
      refuse(ep.in_sock_.get(), src, e.what());
      fail(ep, e.what());
    }
  }
  TPLOG(INFO, SHM) << "shm: rank " << ctx_.rank << " accepted the ring from " << ep.who();
}

void ShmTransport::read_out(ShmEndpoint& ep, EventSink& sink) {
  uint8_t buf[kMaxControl];
  for (;;) {
    int fd = -1;
    ssize_t n = recv_message(ep.out_sock_.get(), {buf, sizeof buf}, &fd);
    if (fd >= 0) ::close(fd);
    if (n == -EAGAIN) return;
    if (n == 0 || n < 0) {
      peer_closed(ep, sink, n == 0 ? "end of stream" : std::strerror(static_cast<int>(-n)));
      return;
    }
    if (n == 1 && buf[0] == kDoorbell) continue;  // space freed in our ring
    Control c;
    std::string err = n > static_cast<ssize_t>(sizeof buf)
                          ? "oversized control message"
                          : decode_control({buf, static_cast<size_t>(n)}, &c);
    if (!err.empty()) {
      fail(ep, "shm: malformed control message from " + ep.who() + ": " + err);
      return;
    }
    switch (c.type) {
      case ControlType::Ack:
        if (ep.out_state_ == ShmEndpoint::OutState::HelloSent) {
          ep.out_state_ = ShmEndpoint::OutState::Accepted;
          if (ep.ready()) {
            TPLOG(INFO, SHM) << "shm: rank " << ctx_.rank << " connected to " << ep.who();
          }
        }
        break;
      case ControlType::Refuse:
        fail(ep, "shm: " + c.reason);
        return;
      case ControlType::Bye:
        ep.bye_ = true;
        break;
      case ControlType::Hello:
        fail(ep, "shm: unexpected HELLO from " + ep.who() + " on an established connection");
        return;
    }
  }
}

void ShmTransport::read_in(ShmEndpoint& ep, EventSink& sink) {
  uint8_t buf[kMaxControl];
  for (;;) {
    int fd = -1;
    ssize_t n = recv_message(ep.in_sock_.get(), {buf, sizeof buf}, &fd);
    if (fd >= 0) ::close(fd);
    if (n == -EAGAIN) return;
    if (n == 0 || n < 0) {
      peer_closed(ep, sink, n == 0 ? "end of stream" : std::strerror(static_cast<int>(-n)));
      return;
    }
    if (n == 1 && buf[0] == kDoorbell) continue;  // the peer wrote while we slept
    Control c;
    std::string err = n > static_cast<ssize_t>(sizeof buf)
                          ? "oversized control message"
                          : decode_control({buf, static_cast<size_t>(n)}, &c);
    if (err.empty() && c.type == ControlType::Bye) {
      ep.bye_ = true;
      continue;
    }
    if (err.empty() && c.type == ControlType::Refuse) {
      // We accepted its ring, but the peer cannot open its direction to us.
      fail(ep, "shm: " + c.reason);
      return;
    }
    fail(ep, "shm: unexpected control message from " + ep.who() + ": " +
                 (err.empty() ? "type " + std::to_string(static_cast<int>(c.type)) : err));
    return;
  }
}

void ShmTransport::check_deadlines() {
  auto now = Clock::now();
  int busy = 0;
  for (auto& [peer, ep] : eps_) {
    if (ep->failed_ || ep->ready()) continue;
    if (ep->out_state_ == ShmEndpoint::OutState::Connecting && now >= ep->next_try_) {
      try_connect(*ep);
      if (ep->failed_) continue;
    }
    if (ep->out_state_ != ShmEndpoint::OutState::None && now >= ep->deadline_) {
      std::string state = ep->out_state_ == ShmEndpoint::OutState::Connecting
                              ? "its socket's listen queue stayed full"
                          : ep->out_state_ == ShmEndpoint::OutState::HelloSent
                              ? "it did not accept our ring (is it calling progress?)"
                              : "its ring never arrived";
      fail(*ep, "shm: connection to " + ep->who() + " not ready by the deadline: " + state);
      continue;
    }
    ++busy;
  }
  handshaking_ = busy;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now - it->second.since > kPendingTimeout) {
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace tpcomm::transport::shm
