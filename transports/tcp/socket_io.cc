// The tcp transport's stream I/O: parsing frames out of a socket (messages handed to the
// sink from the receive buffer; put fragments read straight into their destination) and
// writing a socket's queue (messages first, then put fragments).
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/log.h"
#include "transports/tcp/device.h"

namespace tpcomm::tcp {

void TcpTransport::want_out(Socket& s, bool on) {
  if (s.want_out == on || !s.fd.valid()) return;
  s.want_out = on;
  want_out_count_ += on ? 1 : -1;
  pfds_dirty_ = true;
  if (on) hot_rounds_ = 0;  // poll for POLLOUT from the next round
  epoll_event ev{};
  ev.events = EPOLLIN | (on ? static_cast<uint32_t>(EPOLLOUT) : 0u);
  ev.data.ptr = &s;
  epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, s.fd.get(), &ev);
}

void TcpTransport::put_written(PutTx& tx) {
  if (--tx.frames_left == 0 && !tx.failed)
    events_.push_back(Event{Event::Kind::PutDone, tx.cookie, true, -1, ""});
}

bool TcpTransport::flush(Socket& s) {
  if (s.state != Socket::State::Open) return s.msgs.empty() && s.puts.empty();
  for (;;) {
    if (!s.active) {
      if (!s.msgs.empty()) {
        s.active_put = false;
      } else if (!s.puts.empty()) {
        s.active_put = true;
      } else {
        want_out(s, false);
        return true;
      }
      s.active = true;
    }
    SendItem& item = s.active_put ? s.puts.front() : s.msgs.front();
    ssize_t n;
    if (!item.owned.empty()) {
      n = ::send(s.fd.get(), item.owned.data() + item.done, item.owned.size() - item.done,
                 MSG_NOSIGNAL | MSG_DONTWAIT);
    } else {
      iovec iov[2];
      int cnt = 0;
      if (item.done < kFrameSize) iov[cnt++] = {item.hdr + item.done, kFrameSize - item.done};
      size_t data_done = item.done > kFrameSize ? item.done - kFrameSize : 0;
      if (item.len > data_done)
        iov[cnt++] = {const_cast<uint8_t*>(item.data) + data_done, item.len - data_done};
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = cnt;
      n = ::sendmsg(s.fd.get(), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        want_out(s, true);
        return true;
      }
      fail_later(*s.ep, "sending to rank " + std::to_string(s.ep->peer_) + " (" + s.where +
                            ") failed: " + std::strerror(errno));
      return false;
    }
    item.done += static_cast<size_t>(n);
    if (item.done < item.total()) continue;  // the kernel took part: try again
    s.queued_bytes -= item.total();
    if (item.put) put_written(*item.put);
    if (s.active_put)
      s.puts.pop_front();
    else
      s.msgs.pop_front();
    s.active = false;
  }
}

int TcpTransport::read_frames(Socket& s, transport::EventSink& sink) {
  TcpEndpoint& ep = *s.ep;
  int events = 0;
  auto finish_fragment = [&](const Frame& f) {
    PutRx& rx = ep.rx_puts[f.put_id];
    if (rx.remaining == 0) {
      rx.remaining = f.total;
      rx.imm = f.imm;
    }
    if (!s.direct && f.len > 0) rx.dropped = true;
    rx.remaining -= std::min(rx.remaining, f.len);
    if (rx.remaining == 0) {
      bool dropped = rx.dropped;
      uint32_t imm = rx.imm;
      ep.rx_puts.erase(f.put_id);
      if (!dropped) {
        ++events;
        sink.on_put_arrived(ep.peer_, imm);
      }
    }
  };
  auto broken = [&](const std::string& why) {
    fail_now(ep, why, sink);
    return events + 1;
  };
  // Until the peer's Switch has been read, its messages on our sockets wait in the kernel.
  if (ep.hold_ && s.initiated) return 0;
  bool drained = false;  // the last read came up short: the socket is empty for now
  for (;;) {
    if (s.state != Socket::State::Open) return events;
    if (s.direct_left > 0) {
      uint8_t* to = s.direct ? s.direct : scratch_.data();
      size_t want = s.direct ? s.direct_left : std::min<uint64_t>(s.direct_left, scratch_.size());
      ssize_t n = ::recv(s.fd.get(), to, want, 0);
      if (n > 0) {
        if (s.direct) s.direct += n;
        s.direct_left -= static_cast<uint64_t>(n);
        if (s.direct_left == 0) {
          finish_fragment(s.cur);
          s.direct = nullptr;
        } else if (static_cast<size_t>(n) < want) {
          return events;  // drained for now
        }
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return events;
      return broken(n == 0 ? "rank " + std::to_string(ep.peer_) + " closed the connection (" +
                                 s.where + ") in the middle of a put"
                           : "receiving from rank " + std::to_string(ep.peer_) + " (" + s.where +
                                 ") failed in the middle of a put: " + std::strerror(errno));
    }
    size_t have = s.rtail - s.rhead;
    if (have >= kFrameSize) {
      std::string err;
      auto f = decode_frame(s.rbuf.data() + s.rhead, opt_.max_message, &err);
      if (!f)
        return broken("malformed data from rank " + std::to_string(ep.peer_) + " (" + s.where +
                      "): " + err);
      if (f->kind == FrameKind::Msg) {
        if (s.bulk)
          return broken("rank " + std::to_string(ep.peer_) + " (" + s.where +
                        ") sent a message on a put socket (a peer speaking another tpcomm "
                        "wire version, or not tpcomm: check that every rank runs the same build)");
        if (have >= kFrameSize + f->len) {
          const uint8_t* p = s.rbuf.data() + s.rhead + kFrameSize;
          s.rhead += kFrameSize + f->len;
          ++events;
          if (opt_.poll_every > 1) hot_ = &s;
          sink.on_message(ep.peer_, std::span<const uint8_t>(p, f->len));
          continue;
        }
      } else if (f->kind == FrameKind::Bye) {
        s.rhead += kFrameSize;
        s.bye = true;
        continue;
      } else if (f->kind == FrameKind::Switch) {
        if (s.initiated || ep.switch_seen_)
          return broken("rank " + std::to_string(ep.peer_) + " (" + s.where +
                        ") sent an unexpected socket switch");
        s.rhead += kFrameSize;
        ep.switch_seen_ = true;
        ep.hold_ = false;
        hot_ = nullptr;  // poll every socket from now: the held one has the next messages
        hot_rounds_ = 0;
        continue;
      } else {
        s.rhead += kFrameSize;
        s.cur = *f;
        auto reg = regions_->regions.find(f->region);
        if (reg == regions_->regions.end() || f->offset + f->len > reg->second.length) {
          TPLOG(WARN, TCP) << "rank " << ctx_.rank << ": dropped " << f->len
                           << " bytes put by rank " << ep.peer_ << " into "
                           << (reg == regions_->regions.end() ? "an unregistered region"
                                                              : "a range outside its region")
                           << " (a receive cancelled meanwhile?)";
          s.direct = nullptr;
        } else {
          s.direct = reg->second.addr + f->offset;
        }
        size_t avail = std::min<uint64_t>(s.rtail - s.rhead, f->len);
        if (s.direct && avail) std::memcpy(s.direct, s.rbuf.data() + s.rhead, avail);
        s.rhead += avail;
        if (s.direct) s.direct += avail;
        s.direct_left = f->len - avail;
        if (s.direct_left == 0) {
          finish_fragment(*f);
          s.direct = nullptr;
        }
        continue;
      }
    }
    // Need more bytes: make room and read.
    if (drained) return events;
    if (s.rhead == s.rtail) {
      s.rhead = s.rtail = 0;
    } else if (s.rhead > 0 && (s.rtail == s.rbuf.size() || s.rhead > s.rbuf.size() / 2)) {
      std::memmove(s.rbuf.data(), s.rbuf.data() + s.rhead, s.rtail - s.rhead);
      s.rtail -= s.rhead;
      s.rhead = 0;
    }
    size_t room = s.rbuf.size() - s.rtail;
    // A put socket: the next header and no further (its payload is read in place).
    if (s.bulk) room = std::min(room, kFrameSize - (s.rtail - s.rhead) % kFrameSize);
    ssize_t n = ::recv(s.fd.get(), s.rbuf.data() + s.rtail, room, 0);
    if (n > 0) {
      s.rtail += static_cast<size_t>(n);
      drained = static_cast<size_t>(n) < room;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return events;
    if (n == 0 && s.rtail - s.rhead == 0) {
      // A clean end of stream. The peer's other sockets may still carry data (a put striped
      // over them): the endpoint fails only when its last socket has closed.
      if (s.bye) ep.bye_ = true;
      if (&s == ep.share_on_ && !ep.msg_tx_) {  // its connect() gave up: no move
        ep.share_on_ = nullptr;
        ep.peer_seen_ = 0;
      }
      bool tx = std::find(ep.tx.begin(), ep.tx.end(), &s) != ep.tx.end() || &s == ep.msg_tx_;
      close_socket(s);
      ep.sockets.erase(std::remove(ep.sockets.begin(), ep.sockets.end(), &s), ep.sockets.end());
      if (tx) ep.tx_closed_ = true;
      // Our own sockets held for the peer's Switch do not count: a peer that closed before
      // writing it (killed while connecting) sends nothing more on them.
      bool others = false;
      for (Socket* o : ep.sockets)
        others = others || (o->state == Socket::State::Open && !(ep.hold_ && o->initiated));
      if (others) return events;
      if (ep.hold_)
        return broken("rank " + std::to_string(ep.peer_) + " closed its connection (" + s.where +
                      ") before moving its messages to this rank's socket (no switch frame "
                      "came): it exited or was killed while connecting; see its own log");
      return broken(ep.bye_ ? "rank " + std::to_string(ep.peer_) +
                                  " closed the connection (it destroyed its process group or "
                                  "exited)"
                            : "connection to rank " + std::to_string(ep.peer_) + " (" + s.where +
                                  ") lost: the peer closed it without saying goodbye (crashed?)");
    }
    return broken(n == 0 ? "connection to rank " + std::to_string(ep.peer_) + " (" + s.where +
                               ") closed in the middle of a message"
                         : "receiving from rank " + std::to_string(ep.peer_) + " (" + s.where +
                               ") failed: " + std::strerror(errno));
  }
}

}  // namespace tpcomm::tcp
