// TcpTransport: listener, connection set-up and handshake, memory registration, progress.
#include "transports/tcp/device.h"

#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cstring>

#include "core/auth.h"
#include "core/log.h"
#include "tpcomm/error.hpp"
#include "transports/tcp/congestion.h"
#include "transports/tcp/ifname.h"

namespace tpcomm::tcp {
namespace {

std::string errno_text(int e) { return std::strerror(e); }

// A registered region of the tcp transport: the key's blob is the region id.
class TcpRegion : public transport::MemoryRegion {
 public:
  TcpRegion(std::shared_ptr<RegionTable> t, uint64_t id, void* addr, size_t len, Device dev)
      : MemoryRegion(addr, len, dev), table_(std::move(t)), id_(id) {}
  ~TcpRegion() override { table_->regions.erase(id_); }
  transport::RemoteKey remote_key() const override {
    transport::RemoteKey k;
    k.addr = reinterpret_cast<uint64_t>(addr());
    k.length = length();
    k.set_blob(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&id_), sizeof id_));
    return k;
  }

 private:
  std::shared_ptr<RegionTable> table_;
  uint64_t id_;
};

void set_options(int fd, size_t bufsize) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (bufsize > 0) {
    int b = static_cast<int>(bufsize);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
  }
}

}  // namespace

TcpTransport::TcpTransport(const transport::TransportContext& ctx, const Options& opt)
    : ctx_(ctx), opt_(opt), regions_(std::make_shared<RegionTable>()) {
  secret_ = auth::job_secret();
  scratch_.resize(64 * 1024);
  epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid())
    throw TransportError("tcp transport: epoll_create1 failed: " + errno_text(errno));
  std::string ip, ifname;
  if (!opt_.addr.empty()) {
    ip = opt_.addr;
    ifname = "TPCOMM_SOCKET_ADDR";
    local_ip_ = ip;
  } else {
    auto ifs = select_interfaces(opt_.ifname, opt_.family);
    ip = ifs.front().ip;
    ifname = ifs.front().ifname;
  }
  listener_ = net::listen_on(ip, 0, 1024, true);
  net::SockAddr la = net::local_address(listener_.get());
  listen_addr_ = la.str();
  listen_sa_ = la;
  // Accepted sockets are born with the listener's congestion control: the same-host choice in
  // auto mode (an accepted remote peer gets the system's back in choose_congestion).
  if (opt_.congestion != "system")
    apply_congestion(listener_.get(),
                     opt_.congestion == "auto" ? kLocalCongestion : opt_.congestion,
                     "the listening socket (accepted connections inherit it)");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the listener
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener_.get(), &ev);
  TPLOG(INFO, TCP) << "rank " << ctx_.rank << ": tcp listening on " << listen_addr_ << " ("
                   << ifname << "), "
                   << (opt_.nsocks > 0 ? std::to_string(opt_.nsocks)
                                       : std::string("1 (this host) or 2 (others)"))
                   << " put sockets per peer, congestion "
                   << "control " << opt_.congestion << " (system: " << system_congestion() << ")";
}

TcpTransport::~TcpTransport() { shutdown_all(); }

transport::Capabilities TcpTransport::capabilities() const {
  transport::Capabilities c;
  c.reach = transport::Reach::Network;
  c.native_put = false;
  c.max_message = opt_.max_message;
  c.recv_slots = 0;
  c.rndv_threshold = 64 * 1024;
  c.latency_us = 5.0;
  c.bandwidth_gbps = 3.0;
  return c;
}

std::vector<uint8_t> TcpTransport::address() const {
  std::vector<uint8_t> out(listen_addr_.begin(), listen_addr_.end());
  return out;
}

Socket* TcpTransport::new_socket(int fd, Socket::State state, const std::string& where) {
  auto s = std::make_unique<Socket>();
  s->fd.reset(fd);
  s->state = state;
  s->where = where;
  // Room for two whole messages, so that one always fits after the unread part is moved.
  s->rbuf.resize(2 * (opt_.max_message + kFrameSize));
  Socket* raw = s.get();
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = raw;
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
  sockets_.emplace(raw, std::move(s));
  pfds_dirty_ = true;
  return raw;
}

transport::Endpoint& TcpTransport::connect(int peer, std::span<const uint8_t> peer_address,
                                           std::chrono::steady_clock::time_point deadline) {
  auto it = endpoints_.find(peer);
  if (it != endpoints_.end()) return *it->second;
  std::string where(peer_address.begin(), peer_address.end());
  auto [host, port] = net::split_host_port(where);
  std::vector<net::SockAddr> addrs = net::resolve(host, port);
  auto ep = std::make_unique<TcpEndpoint>(this, peer);
  ep->active_ = true;
  std::vector<Socket*> made;
  try {
    // Socket 0 carries messages only; puts are striped over the other nsocks.
    const int puts = put_sockets_for(opt_.nsocks, listen_sa_, addrs.front());
    const int total = puts + 1;
    for (int i = 0; i < total; ++i) {
      const net::SockAddr& a = addrs.front();
      int fd = ::socket(a.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) throw TransportError("tcp: socket() failed: " + errno_text(errno));
      net::Fd guard(fd);
      if (!local_ip_.empty()) {
        auto la = net::resolve(local_ip_, 0);
        if (!la.empty() && la.front().family() == a.family())
          ::bind(fd, reinterpret_cast<const sockaddr*>(&la.front().ss), la.front().len);
      }
      set_options(fd, opt_.bufsize);
      choose_congestion(fd, a, false);
      int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&a.ss), a.len);
      if (rc != 0 && errno != EINPROGRESS)
        throw TransportError("tcp: cannot connect to rank " + std::to_string(peer) + " at " +
                             where + ": " + errno_text(errno));
      if (rc != 0) {
        pollfd p{fd, POLLOUT, 0};
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        int n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
        if (n == 0)
          throw TimeoutError("tcp: connecting to rank " + std::to_string(peer) + " at " + where +
                             " timed out");
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0)
          throw TransportError("tcp: cannot connect to rank " + std::to_string(peer) + " at " +
                               where + ": " + errno_text(err) + " (is rank " +
                               std::to_string(peer) + " still running?)");
      }
      Hello h;
      h.nsocks = static_cast<uint16_t>(total);
      h.index = static_cast<uint16_t>(i);
      h.src = ctx_.rank;
      h.dst = peer;
      h.world_size = ctx_.world_size;
      h.job_id = ctx_.job_id;
      uint8_t buf[kHelloFixed + kMaxJobId];
      size_t n = encode_hello(h, buf);
      if (::send(fd, buf, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n))
        throw TransportError("tcp: handshake to rank " + std::to_string(peer) + " at " + where +
                             " failed: " + errno_text(errno));
      Socket* s = new_socket(guard.release(), Socket::State::AwaitAck, where);
      s->initiated = true;
      mark_index(*s, static_cast<size_t>(i));
      s->ep = ep.get();
      made.push_back(s);
    }
  } catch (...) {
    for (Socket* s : made) close_socket(*s);
    throw;
  }
  ep->tx = made;
  ep->sockets = made;
  TPLOG(INFO, TCP) << "rank " << ctx_.rank << " -> rank " << peer << ": connecting " << made.size()
                   << " sockets to " << where << " (one for messages, " << made.size() - 1
                   << " for puts)";
  TcpEndpoint& ref = *ep;
  endpoints_.emplace(peer, std::move(ep));
  return ref;
}

std::unique_ptr<transport::MemoryRegion> TcpTransport::register_memory(void* addr, size_t length,
                                                                       tpcomm::Device device) {
  if (device.type != DeviceType::CPU)
    throw NotSupportedError("tcp transport: cannot register " + device.str() +
                            " memory; stage it through host memory");
  uint64_t id = regions_->next_id++;
  regions_->regions[id] = RegionTable::Entry{static_cast<uint8_t*>(addr), length};
  return std::make_unique<TcpRegion>(regions_, id, addr, length, device);
}

int TcpTransport::accept_new() {
  int n = 0;
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    net::SockAddr a;
    std::memcpy(&a.ss, &ss, sizeof ss);
    a.len = len;
    set_options(fd, opt_.bufsize);
    choose_congestion(fd, a, true);
    new_socket(fd, Socket::State::AwaitHello, a.str());
    ++n;
  }
  return n;
}

int put_sockets_for(int nsocks, const net::SockAddr& local, const net::SockAddr& peer) {
  if (nsocks > 0) return nsocks;
  // Within a host both ends of every socket run on the same cores: a second put socket adds
  // system calls and wake-ups, not bandwidth (2-rank 256 MiB tcp all_reduce: median 2.72
  // against 2.47 GB/s in 8 rounds of TPCOMM_SOCKET_NSOCKS=1 vs 2).
  // Across hosts two flows ride out a single flow's loss recovery. "Within a host" is what
  // same_host() can tell: a loopback address or this rank's own (containers of one node with
  // addresses of their own get two).
  return same_host(local, peer) ? 1 : 2;
}

void TcpTransport::choose_congestion(int fd, const net::SockAddr& peer, bool accepted) {
  const std::string& mode = opt_.congestion;
  if (mode == "system") return;
  std::string want;
  if (mode == "auto") {
    const bool local = same_host(listen_sa_, peer);
    if (local == accepted) return;  // accepted local: inherited; connecting remote: the system's
    want = local ? kLocalCongestion : system_congestion();
  } else {
    if (accepted) return;  // inherited from the listener
    want = mode;
  }
  if (!want.empty()) apply_congestion(fd, want, "a connection with " + peer.str());
}

void TcpTransport::apply_congestion(int fd, const std::string& want, const std::string& whose) {
  std::string err;
  if (set_congestion(fd, want, &err) || congestion_warned_) return;
  congestion_warned_ = true;
  TPLOG(WARN, TCP) << "rank " << ctx_.rank << ": TCP congestion control '" << want
                   << "' refused for " << whose << " (" << err << "); it keeps '"
                   << congestion_of(fd)
                   << "' (set TPCOMM_SOCKET_CONGESTION=system to leave every socket as it is)";
}

void TcpTransport::refuse(Socket& s, const std::string& reason) {
  TPLOG(WARN, TCP) << "rank " << ctx_.rank << ": refused a connection from " << s.where << ": "
                   << reason;
  Ack a;
  a.status = 1;
  a.reason = "rank " + std::to_string(ctx_.rank) + " refused the connection: " + reason;
  uint8_t buf[kAckFixed + kMaxReason];
  size_t n = encode_ack(a, buf);
  ssize_t r = ::send(s.fd.get(), buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)r;
  close_socket(s);
}

void TcpTransport::attach_accepted(Socket& s, const Hello& h, const std::string& note) {
  auto it = endpoints_.find(h.src);
  TcpEndpoint* ep;
  if (it == endpoints_.end()) {
    auto e = std::make_unique<TcpEndpoint>(this, h.src);
    e->expected_ = h.nsocks;
    e->tx.assign(h.nsocks, nullptr);
    ep = e.get();
    endpoints_.emplace(h.src, std::move(e));
  } else {
    ep = it->second.get();
  }
  if (ep->failed_) {
    refuse(s, "an earlier connection from rank " + std::to_string(h.src) + " failed");
    return;
  }
  if (!ep->active_) {
    if (h.nsocks != ep->expected_ || ep->tx[h.index]) {
      refuse(s, "duplicate or inconsistent socket " + std::to_string(h.index) + "/" +
                    std::to_string(h.nsocks) + " from rank " + std::to_string(h.src));
      return;
    }
    ep->tx[h.index] = &s;
  }
  s.ep = ep;
  s.state = Socket::State::Open;
  mark_index(s, h.index);
  ep->sockets.push_back(&s);
  // Both ranks connected: the higher one moves its messages onto the lower one's first socket
  // (device.h, msg_tx_), once every socket of that connection is here (a first socket alone
  // may come from a connect() that failed after it).
  bool share = false;
  if (ep->active_ && h.src < ctx_.rank && !ep->msg_tx_ && !ep->tx.empty() && ep->tx[0]) {
    ep->peer_seen_ |= uint64_t{1} << h.index;
    ep->peer_nsocks_ = h.nsocks;
    if (h.index == 0) {
      ep->share_on_ = &s;
      share = true;
    }
  }
  Ack a;
  a.status = share ? kAckShared : 0;
  a.reason = note;  // the acceptor's proof when the peer was challenged
  uint8_t buf[kAckFixed + kMaxReason];
  size_t n = encode_ack(a, buf);
  if (::send(s.fd.get(), buf, n, MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(n)) {
    fail_later(*ep, "handshake answer to " + s.where + " failed: " + errno_text(errno));
    return;
  }
  const uint64_t all_of_them =
      ep->peer_nsocks_ >= 64 ? ~uint64_t{0} : (uint64_t{1} << ep->peer_nsocks_) - 1;
  if (ep->share_on_ && !ep->msg_tx_ && ep->peer_seen_ == all_of_them) {
    // The Switch goes after every message already queued on our own first socket; the peer
    // reads nothing on its sockets before it.
    Socket& own = *ep->tx[0];
    queue_control(own, FrameKind::Switch);
    ep->msg_tx_ = ep->share_on_;
    if (ep->ready_) flush(own);
    TPLOG(INFO, TCP) << "rank " << ctx_.rank << " -> rank " << h.src
                     << ": messages move to the socket rank " << h.src << " connected ("
                     << ep->msg_tx_->where << ")";
  }
  if (!ep->active_) {
    bool all = true;
    for (Socket* t : ep->tx) all = all && t;
    if (all) {
      ep->ready_ = true;
      TPLOG(INFO, TCP) << "rank " << ctx_.rank << " <- rank " << h.src << ": accepted " << h.nsocks
                       << " sockets from " << s.where;
    }
  }
}

int TcpTransport::handshake(Socket& s, transport::EventSink& sink) {
  uint8_t buf[1024];
  size_t want = s.state == Socket::State::AwaitHello  ? kHelloFixed
                : s.state == Socket::State::AwaitAuth ? kAuthResponseSize
                                                      : kAckFixed;
  for (;;) {
    std::string err;
    size_t need = 0;
    if (s.hs.size() >= want) {
      if (s.state == Socket::State::AwaitAuth) {
        auth_check_response(s);
        return 0;
      }
      if (s.state == Socket::State::AwaitHello) {
        Hello h;
        need = decode_hello(s.hs.data(), s.hs.size(), &h, &err);
        if (need == 0) {
          refuse(s, err);
          return 0;
        }
        if (need <= s.hs.size()) {
          if (h.job_id != ctx_.job_id)
            refuse(s, "job id '" + h.job_id + "' differs from this job's '" + ctx_.job_id + "'");
          else if (h.dst != ctx_.rank)
            refuse(s, "it wants rank " + std::to_string(h.dst) + ", this is rank " +
                          std::to_string(ctx_.rank) + " (stale address?)");
          else if (h.world_size != ctx_.world_size || h.src < 0 || h.src >= ctx_.world_size ||
                   h.src == ctx_.rank)
            refuse(s, "rank " + std::to_string(h.src) + " of a world of " +
                          std::to_string(h.world_size) + " does not fit this world of " +
                          std::to_string(ctx_.world_size));
          else if (!secret_.empty()) {
            s.hello = h;
            auth_challenge(s);
          } else {
            attach_accepted(s, h);
          }
          return 0;
        }
      } else {
        Ack a;
        need = decode_ack(s.hs.data(), s.hs.size(), &a, &err);
        if (need != 0 && need <= s.hs.size() && a.status == kAckChallenge) {
          if (!auth_answer(s, a, sink)) return 1;
          want = kAckFixed;  // then the final answer
          continue;
        }
        bool accepted = a.status == 0 || a.status == kAckShared;
        if (need != 0 && need <= s.hs.size() && accepted && !auth_check_ack(s, a, sink))
          return 1;
        if (need == 0 || (need <= s.hs.size() && !accepted)) {
          std::string why = need == 0 ? err : a.reason;
          fail_now(*s.ep, "connection to " + s.where + " refused: " + why, sink);
          return 1;
        }
        if (need <= s.hs.size()) {
          s.state = Socket::State::Open;
          TcpEndpoint& ep = *s.ep;
          // The peer's messages will come on this socket after its Switch (kAckShared).
          if (a.status == kAckShared && !ep.switch_seen_) ep.hold_ = true;
          bool all = true;
          for (Socket* t : ep.tx) all = all && t->state == Socket::State::Open;
          if (all && !ep.ready_) {
            ep.ready_ = true;
            TPLOG(INFO, TCP) << "rank " << ctx_.rank << " -> rank " << ep.peer_ << ": "
                             << ep.tx.size() << " sockets connected to " << s.where;
            for (Socket* t : ep.tx) flush(*t);
          }
          return 1;
        }
      }
      want = need;
    }
    // Read no further than the handshake: frames follow it on the same stream.
    ssize_t n = ::recv(s.fd.get(), buf, std::min(sizeof buf, want - s.hs.size()), 0);
    if (n > 0) {
      s.hs.insert(s.hs.end(), buf, buf + n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    std::string why = n == 0 ? std::string("closed during the handshake") : errno_text(errno);
    if (s.state == Socket::State::AwaitAuth) {
      TPLOG(WARN, TCP) << "rank " << ctx_.rank << ": rank " << s.hello.src << " at " << s.where
                       << " closed the connection instead of answering the shared-secret "
                       << "challenge (TPCOMM_AUTH_SECRET is set here: is it set there?)";
      close_socket(s);
      return 0;
    }
    if (s.state == Socket::State::AwaitHello) {
      TPLOG(INFO, TCP) << "rank " << ctx_.rank << ": connection from " << s.where
                       << " dropped before its handshake: " << why;
      close_socket(s);
      return 0;
    }
    fail_now(*s.ep, "connection to " + s.where + " " + why, sink);
    return 1;
  }
}

void TcpTransport::close_socket(Socket& s) {
  if (s.fd.valid()) {
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s.fd.get(), nullptr);
    s.fd.reset();
  }
  s.state = Socket::State::Closed;
  pfds_dirty_ = true;
  if (s.want_out) {
    s.want_out = false;
    --want_out_count_;
  }
  if (hot_ == &s) {
    hot_ = nullptr;
    hot_rounds_ = 0;
  }
  auto it = sockets_.find(&s);
  if (it != sockets_.end()) {
    graveyard_.push_back(std::move(it->second));
    sockets_.erase(it);
  }
}

void TcpTransport::fail_later(TcpEndpoint& ep, const std::string& reason) {
  if (ep.failed_) return;
  for (auto& [e, r] : failing_)
    if (e == &ep) return;
  failing_.emplace_back(&ep, reason);
}

void TcpTransport::fail_now(TcpEndpoint& ep, const std::string& reason,
                            transport::EventSink& sink) {
  if (ep.failed_) return;
  ep.failed_ = true;  // first, so that draining cannot recurse into here
  // Whatever the peer sent before it went away is still in our receive queues: deliver it
  // before the error, so that a message sent just before a clean exit is not lost.
  // The peer's sockets first: a Switch there releases the messages held on ours.
  for (bool ours : {false, true})
    for (Socket* s : std::vector<Socket*>(ep.sockets))
      if (s->state == Socket::State::Open && s->initiated == ours) read_frames(*s, sink);
  for (Socket* s : std::vector<Socket*>(ep.sockets)) {
    for (auto* q : {&s->msgs, &s->puts})
      for (SendItem& item : *q)
        if (item.put && !item.put->failed) {
          item.put->failed = true;
          events_.push_back(Event{Event::Kind::PutDone, item.put->cookie, false, -1, ""});
        }
    s->msgs.clear();
    s->puts.clear();
    close_socket(*s);
  }
  ep.sockets.clear();
  ep.ready_ = false;
  events_.push_back(Event{Event::Kind::PeerError, 0, false, ep.peer_, reason});
}

int TcpTransport::deliver_events(transport::EventSink& sink) {
  int n = 0;
  while (!failing_.empty()) {
    auto f = failing_.back();
    failing_.pop_back();
    fail_now(*f.first, f.second, sink);
  }
  while (!events_.empty()) {
    std::vector<Event> evs;
    evs.swap(events_);
    for (Event& e : evs) {
      ++n;
      if (e.kind == Event::Kind::PutDone)
        sink.on_put_done(e.cookie, e.ok);
      else
        sink.on_peer_error(e.peer, e.reason);
    }
  }
  return n;
}

int TcpTransport::handle_ready(Socket* s, bool in, bool out, transport::EventSink& sink) {
  if (!s) return accept_new();
  if (!sockets_.count(s) || s->state == Socket::State::Closed) return 0;  // closed meanwhile
  int n = 0;
  if (out && s->state == Socket::State::Open && s->ep && s->ep->ready_) flush(*s);
  if (in) n += s->state == Socket::State::Open ? read_frames(*s, sink) : handshake(*s, sink);
  return n;
}

int TcpTransport::progress(transport::EventSink& sink) {
  int n = events_.empty() && failing_.empty() ? 0 : deliver_events(sink);
  if (hot_rounds_ > 0 && hot_ != nullptr) {
    // The hot socket alone: one recv(), which answers EAGAIN while nothing came. Other sockets
    // (the listener, another peer) wait at most poll_every rounds.
    --hot_rounds_;
    n += read_frames(*hot_, sink);
    // A put began (its bytes come on every socket of the peer): poll all from the next round.
    if (hot_ != nullptr && (hot_->direct_left > 0 || !hot_->ep->rx_puts.empty())) hot_rounds_ = 0;
  } else {
    n += poll_all(sink);
  }
  if (!events_.empty() || !failing_.empty()) n += deliver_events(sink);
  if (!graveyard_.empty()) graveyard_.clear();
  return n;
}

int TcpTransport::poll_all(transport::EventSink& sink) {
  int n = 0;
  size_t others = 0;  // ready sockets besides the hot one
  if (sockets_.size() < kPollLimit) {
    // A busy-polling caller comes here millions of times a second: poll() with a zero
    // timeout only reads each socket's state, where epoll_wait() would take the epoll
    // set's lock that every arriving packet also takes (contention, worst in a VM).
    if (pfds_dirty_) {
      pfds_.clear();
      psocks_.clear();
      pfds_.push_back(pollfd{listener_.get(), POLLIN, 0});
      psocks_.push_back(nullptr);
      for (auto& [raw, s] : sockets_) {
        if (!s->fd.valid()) continue;
        pfds_.push_back(
            pollfd{s->fd.get(), static_cast<short>(POLLIN | (s->want_out ? POLLOUT : 0)), 0});
        psocks_.push_back(raw);
      }
      pfds_dirty_ = false;
    }
    int k = ::poll(pfds_.data(), pfds_.size(), 0);
    if (k > 0) {
      // Callbacks may open or close sockets (pfds_dirty_): work on a copy of the ready set.
      ready_.clear();
      for (size_t i = 0; i < pfds_.size() && static_cast<int>(ready_.size()) < k; ++i)
        if (pfds_[i].revents) ready_.emplace_back(psocks_[i], pfds_[i].revents);
      for (size_t i = 0; i < ready_.size(); ++i) {
        auto [s, ev] = ready_[i];
        if (s != hot_) ++others;
        n += handle_ready(s, ev & (POLLIN | POLLERR | POLLHUP), ev & POLLOUT, sink);
      }
    }
  } else {
    epoll_event evs[64];
    int k = epoll_wait(epoll_.get(), evs, 64, 0);
    for (int i = 0; i < k; ++i) {
      auto* s = static_cast<Socket*>(evs[i].data.ptr);
      if (s != hot_) ++others;
      n += handle_ready(s, evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP),
                        evs[i].events & EPOLLOUT, sink);
    }
  }
  // Read the hot socket alone for the next rounds only while nothing else needs us: no
  // other socket had anything, none waits to write, the hot one is not in a put's payload.
  bool quiet = others == 0 && want_out_count_ == 0 && !pfds_dirty_ && hot_ != nullptr &&
               hot_->direct_left == 0 && hot_->ep->rx_puts.empty();
  hot_rounds_ = quiet ? opt_.poll_every - 1 : 0;
  return n;
}

void TcpTransport::shutdown_all() {
  // Flush what was accepted, say goodbye, and drain what the peers sent so that close()
  // sends a FIN rather than a reset.
  auto until = std::chrono::steady_clock::now() +
               std::min<std::chrono::milliseconds>(ctx_.timeout, std::chrono::seconds(10));
  for (auto& [peer, ep] : endpoints_) {
    if (ep->failed_) continue;
    // Goodbye on every socket, those the peer sends on too: it then knows the end of each
    // stream is intended.
    for (Socket* s : ep->sockets) {
      if (!s || s->state != Socket::State::Open) continue;
      queue_control(*s, FrameKind::Bye);
      while ((!s->msgs.empty() || !s->puts.empty()) && flush(*s) &&
             std::chrono::steady_clock::now() < until) {
        if (s->msgs.empty() && s->puts.empty()) break;
        pollfd p{s->fd.get(), POLLOUT, 0};
        ::poll(&p, 1, 10);
      }
      if (s->fd.valid()) ::shutdown(s->fd.get(), SHUT_WR);
    }
  }
  for (auto& [raw, s] : sockets_) {
    if (!s->fd.valid()) continue;
    ssize_t r;
    do {
      r = ::recv(s->fd.get(), scratch_.data(), scratch_.size(), MSG_DONTWAIT);
    } while (r > 0);
  }
  for (auto& [raw, s] : sockets_) s->fd.reset();
  sockets_.clear();
  graveyard_.clear();
}

// ---- shared secret (TPCOMM_AUTH_SECRET) ----------------------------------------------------
// Acceptor: hello ok -> ack status 2 "[challenge N_a]". Connector: "TPAR" N_c
// HMAC(secret, "tcp-connector" | job | N_a | N_c). Acceptor: checks it -> ack status 0
// "[proof HMAC(secret, "tcp-acceptor" | job | N_c | N_a)]", or refuses. Connector: checks
// the proof. Each side proves itself on the other's fresh nonce; the secret never travels.

void TcpTransport::auth_challenge(Socket& s) {
  s.mine = auth::make_nonce();
  Ack a;
  a.status = kAckChallenge;
  a.reason = "rank " + std::to_string(ctx_.rank) +
             " requires the job's shared secret (set TPCOMM_AUTH_SECRET or "
             "TPCOMM_AUTH_SECRET_FILE to the same value on every rank) [challenge " +
             auth::hex(s.mine) + "]";
  uint8_t buf[kAckFixed + kMaxReason];
  size_t n = encode_ack(a, buf);
  if (::send(s.fd.get(), buf, n, MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(n)) {
    close_socket(s);
    return;
  }
  s.hs.clear();
  s.state = Socket::State::AwaitAuth;
}

void TcpTransport::auth_check_response(Socket& s) {
  const uint8_t* p = s.hs.data();
  if (s.hs.size() < kAuthResponseSize || std::memcmp(p, "TPAR", 4) != 0) {
    refuse(s, "rank " + std::to_string(s.hello.src) +
                  " sent no answer to the shared-secret challenge (TPCOMM_AUTH_SECRET)");
    return;
  }
  std::memcpy(s.theirs.data(), p + 4, 16);
  crypto::Digest got;
  std::memcpy(got.data(), p + 20, 32);
  crypto::Digest want = auth::proof(secret_, "tcp-connector", ctx_.job_id, s.mine, s.theirs);
  if (!crypto::digest_equal(got, want)) {
    refuse(s, "rank " + std::to_string(s.hello.src) +
                  " failed the shared-secret challenge: its TPCOMM_AUTH_SECRET differs from "
                  "this rank's");
    return;
  }
  crypto::Digest mine = auth::proof(secret_, "tcp-acceptor", ctx_.job_id, s.theirs, s.mine);
  s.hs.clear();
  attach_accepted(s, s.hello, "[proof " + auth::hex(mine) + "]");
}

bool TcpTransport::auth_answer(Socket& s, const Ack& a, transport::EventSink& sink) {
  std::string peer = "rank " + std::to_string(s.ep->peer_) + " at " + s.where;
  if (secret_.empty()) {
    fail_now(
        *s.ep,
        "connection to " + peer + " refused: " + a.reason + "; this rank has no TPCOMM_AUTH_SECRET",
        sink);
    return false;
  }
  size_t at = a.reason.rfind("[challenge ");
  if (s.challenged || at == std::string::npos ||
      !auth::unhex(std::string_view(a.reason).substr(at + 11, 32), s.theirs)) {
    fail_now(*s.ep, "connection to " + peer + ": malformed shared-secret challenge", sink);
    return false;
  }
  s.mine = auth::make_nonce();
  crypto::Digest pr = auth::proof(secret_, "tcp-connector", ctx_.job_id, s.theirs, s.mine);
  uint8_t out[kAuthResponseSize];
  std::memcpy(out, "TPAR", 4);
  std::memcpy(out + 4, s.mine.data(), 16);
  std::memcpy(out + 20, pr.data(), 32);
  if (::send(s.fd.get(), out, sizeof out, MSG_NOSIGNAL | MSG_DONTWAIT) !=
      static_cast<ssize_t>(sizeof out)) {
    fail_now(*s.ep,
             "connection to " + peer +
                 ": answering the shared-secret challenge failed: " + errno_text(errno),
             sink);
    return false;
  }
  s.challenged = true;
  s.hs.clear();
  return true;
}

bool TcpTransport::auth_check_ack(Socket& s, const Ack& a, transport::EventSink& sink) {
  if (secret_.empty()) return true;
  std::string peer = "rank " + std::to_string(s.ep->peer_) + " at " + s.where;
  if (!s.challenged) {
    fail_now(*s.ep,
             "connection to " + peer + " refused here: that rank accepted it without " +
                 "asking for the shared secret (TPCOMM_AUTH_SECRET is set on this rank, " +
                 "not there)",
             sink);
    return false;
  }
  crypto::Digest want = auth::proof(secret_, "tcp-acceptor", ctx_.job_id, s.mine, s.theirs);
  size_t at = a.reason.rfind("[proof ");
  crypto::Digest got{};
  if (at == std::string::npos || !auth::unhex(std::string_view(a.reason).substr(at + 7, 64), got) ||
      !crypto::digest_equal(got, want)) {
    fail_now(*s.ep,
             "connection to " + peer + " refused here: that rank did not prove the " +
                 "job's shared secret (its TPCOMM_AUTH_SECRET differs)",
             sink);
    return false;
  }
  return true;
}

}  // namespace tpcomm::tcp
