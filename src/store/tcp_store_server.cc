// TCPStore server: the event loop (accept, read, parse, reply, flush) on one epoll thread.
// The key-value operations and parked waits are in tcp_store_server_ops.cc.
#include <fcntl.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/auth.h"
#include "core/config.h"
#include "core/log.h"
#include "net/socket.h"
#include "store/tcp_store_server_impl.h"
#include "tpcomm/error.hpp"

namespace tpcomm {

using store_wire::ErrorCode;
using store_wire::Header;
using store_wire::HeaderStatus;
using store_wire::Op;

namespace {

constexpr int kMaxEvents = 256;
constexpr int kAcceptsPerRound = 256;
// Stop reading from a client whose unread replies pile up beyond this (it is not reading).
constexpr size_t kOutBacklogLimit = 64u << 20;
constexpr size_t kShrinkAbove = 1u << 20;

}  // namespace

TCPStoreServerConfig TCPStoreServerConfig::from_registry(std::string host, uint16_t port,
                                                         std::string job_id) {
  TCPStoreServerConfig c;
  c.host = std::move(host);
  c.port = port;
  c.job_id = resolve_store_job_id(job_id);
  c.backlog = static_cast<int>(config::get_int("TPCOMM_STORE_BACKLOG"));
  c.max_key = config::get_size("TPCOMM_STORE_MAX_KEY");
  c.max_value = config::get_size("TPCOMM_STORE_MAX_VALUE");
  c.max_clients = static_cast<int>(config::get_int("TPCOMM_STORE_MAX_CLIENTS"));
  c.spin = store_spin_from_registry();
  c.handshake_timeout = config::get_duration("TPCOMM_STORE_HANDSHAKE_TIMEOUT");
  c.local_socket = config::get_bool("TPCOMM_STORE_LOCAL_SOCKET");
  return c;
}

std::string resolve_store_job_id(const std::string& explicit_id) {
  if (!explicit_id.empty()) return explicit_id;
  std::string env = config::get_string("TPCOMM_JOB_ID");
  return env.empty() ? "default" : env;
}

std::chrono::microseconds store_spin_from_registry() {
  // get_duration validates the value (ConfigError when malformed) but rounds to ms.
  auto ms = config::get_duration("TPCOMM_STORE_SPIN");
  std::string raw = config::raw("TPCOMM_STORE_SPIN").value_or("50us");
  size_t end = raw.find_last_not_of(" \t");
  if (end != std::string::npos && end >= 1 && (raw[end] == 's' || raw[end] == 'S') &&
      (raw[end - 1] == 'u' || raw[end - 1] == 'U')) {
    return std::chrono::microseconds(static_cast<int64_t>(std::strtod(raw.c_str(), nullptr)));
  }
  return std::chrono::duration_cast<std::chrono::microseconds>(ms);
}

// ---- construction and the thread ----------------------------------------------------------

TCPStoreServer::Impl::Impl(const TCPStoreServerConfig& c) : cfg(c) {
  limits.max_key = c.max_key;
  limits.max_value = c.max_value;
  self_desc = net::hostname() + ":" + std::to_string(::getpid());
  secret = auth::job_secret();
  net::Fd lfd = net::listen_on(c.host, c.port, c.backlog, /*nonblocking=*/true);
  bound_port = net::local_address(lfd.get()).port();
  listen_fd = lfd.release();
  addr = net::join_host_port(c.host.empty() ? "*" : c.host, bound_port);
  wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (wake_fd < 0 || epoll_fd < 0) {
    int err = errno;
    close_fds();
    throw TransportError("TCPStore server " + addr +
                         ": cannot create epoll/eventfd: " + std::strerror(err));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
  ev.data.fd = wake_fd;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &ev);
  if (c.local_socket) open_local_socket();
  TPLOG(INFO, STORE) << "TCPStore server listening on " << addr << " (job '" << cfg.job_id
                     << "', max key " << cfg.max_key << " B, max value " << cfg.max_value
                     << " B, max clients " << cfg.max_clients << ")";
  spin_client_limit = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2);
  thread = std::thread([this] { run(); });
}

TCPStoreServer::Impl::~Impl() {
  stop();
  close_fds();
}

void TCPStoreServer::Impl::close_fds() {
  for (int* fd : {&listen_fd, &wake_fd, &epoll_fd, &reserve_fd, &local_fd}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void TCPStoreServer::Impl::stop() {
  if (!thread.joinable()) return;
  stopping.store(true);
  uint64_t one = 1;
  ssize_t rc = ::write(wake_fd, &one, sizeof(one));
  (void)rc;
  thread.join();
}

void TCPStoreServer::Impl::run() {
  epoll_event events[kMaxEvents];
  const auto spin = cfg.spin;
  while (!stopping.load(std::memory_order_relaxed)) {
    int n = ::epoll_wait(epoll_fd, events, kMaxEvents, 0);
    if (n == 0 && spin.count() > 0 && spin_hits > 0 && clients <= spin_client_limit) {
      // Busy-poll a little before sleeping: a client answered a moment ago usually sends
      // its next request within microseconds, and a kernel wake-up costs tens of them.
      // Only with few clients: many keep the server busy anyway, and their processes need
      // the cores more than a spinning server does.
      auto until = std::chrono::steady_clock::now() + spin;
      while (n == 0 && std::chrono::steady_clock::now() < until &&
             !stopping.load(std::memory_order_relaxed)) {
        sched_yield();
        n = ::epoll_wait(epoll_fd, events, kMaxEvents, 0);
      }
      spin_hits = n > 0 ? std::min(spin_hits + 1, 8) : spin_hits - 1;
    }
    if (n == 0) {
      // Sleep until an event or the next handshake deadline (no sleep when expiring one
      // produced output to flush).
      int timeout_ms = pending_hello.empty() ? -1 : expire_handshakes();
      if (!dirty.empty() || !graveyard.empty()) timeout_ms = 0;
      n = ::epoll_wait(epoll_fd, events, kMaxEvents, timeout_ms);
      if (spin.count() > 0 && n > 0) spin_hits = std::max(spin_hits, 1);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      TPLOG(WARN, STORE) << "TCPStore server " << addr
                         << ": epoll_wait failed: " << std::strerror(errno) << "; stopping";
      break;
    }
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      uint32_t ev = events[i].events;
      if (fd == listen_fd || fd == local_fd) {
        accept_clients(fd);
      } else if (fd == wake_fd) {
        uint64_t v;
        ssize_t rc = ::read(wake_fd, &v, sizeof(v));
        (void)rc;
      } else if (fd >= 0 && static_cast<size_t>(fd) < conns.size() && conns[fd] &&
                 !conns[fd]->dead) {
        Conn& c = *conns[fd];
        if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) on_readable(c);
        if (!c.dead && (ev & EPOLLOUT)) flush(c);
      }
    }
    flush_dirty();
    if (!pending_hello.empty()) {
      expire_handshakes();
      flush_dirty();
    }
    bury_dead();
  }
  shutdown_all();
}

// ---- connections ------------------------------------------------------------------------------

void TCPStoreServer::Impl::open_local_socket() {
  // Abstract names (Linux) vanish with the socket; the random part makes the name unguessable
  // and unique, so a client that reaches it reaches this very server.
  uint64_t nonce = std::random_device{}();
  nonce = (nonce << 32) ^ std::random_device{}() ^
          static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  char name[96];
  std::snprintf(name, sizeof(name), "tpcomm-store-%d-%u-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned>(bound_port), static_cast<unsigned long long>(nonce));
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  size_t n = std::strlen(name);
  std::memcpy(sa.sun_path + 1, name, n);
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0 ||
      ::listen(fd, cfg.backlog) != 0) {
    TPLOG(INFO, STORE) << "TCPStore server " << addr << ": no local socket ("
                       << std::strerror(errno) << "); clients of this host use TCP";
    if (fd >= 0) ::close(fd);
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  local_fd = fd;
  local_name = name;
}

void TCPStoreServer::Impl::accept_clients(int lfd) {
  for (int i = 0; i < kAcceptsPerRound; ++i) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd = ::accept4(lfd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: the pending connection would keep the listener readable
        // forever. Use the reserved descriptor to accept it and close it at once.
        TPLOG(WARN, STORE) << "TCPStore server " << addr << ": out of file descriptors with "
                           << open_conns << " clients; refusing a connection (raise `ulimit -n`)";
        if (reserve_fd >= 0) {
          ::close(reserve_fd);
          int tmp = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
          if (tmp >= 0) ::close(tmp);
          reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
      }
      return;
    }
    const bool local = lfd == local_fd;
    int one = 1;
    if (!local) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (static_cast<size_t>(fd) >= conns.size()) conns.resize(static_cast<size_t>(fd) * 2 + 64);
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->id = next_conn_id++;
    if (local) {
      ucred cred{};
      socklen_t clen = sizeof(cred);
      ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen);
      c->peer = "local socket of pid " + std::to_string(cred.pid);
    } else {
      SockAddr_to_text(ss, len, &c->peer);
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      TPLOG(WARN, STORE) << "TCPStore server " << addr << ": epoll_ctl failed for " << c->peer
                         << ": " << std::strerror(errno);
      ::close(fd);
      continue;
    }
    c->ev_mask = ev.events;
    if (cfg.handshake_timeout.count() > 0) {
      pending_hello.push_back(
          {fd, c->id, std::chrono::steady_clock::now() + cfg.handshake_timeout});
    }
    conns[fd] = std::move(c);
    ++open_conns;
    conn_count.store(open_conns, std::memory_order_relaxed);
  }
}

int TCPStoreServer::Impl::expire_handshakes() {
  auto now = std::chrono::steady_clock::now();
  while (!pending_hello.empty()) {
    const PendingHello p = pending_hello.front();
    Conn* c = conns[p.fd].get();
    if (!c || c->id != p.id || c->dead || c->hello) {
      pending_hello.pop_front();
      continue;
    }
    if (p.due > now) {
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(p.due - now).count();
      return static_cast<int>(std::min<int64_t>(ms, 60000));
    }
    pending_hello.pop_front();
    // A hello that arrived just now still counts.
    on_readable(*c);
    if (c->dead || c->hello) continue;
    ++handshake_timeouts;
    std::string msg =
        "TCPStore server " + addr + ": closing " + c->peer + ": no handshake within " +
        std::to_string(cfg.handshake_timeout.count()) + " ms (" +
        (c->close_after_flush ? std::string("refused, and it does not read the reply")
                              : std::to_string(c->in.len) + " bytes of a hello arrived") +
        "); a store client introduces itself at once, so this is another program or a stuck "
        "process (TPCOMM_STORE_HANDSHAKE_TIMEOUT sets the limit)";
    if (handshake_timeouts <= 16) {
      if (handshake_timeouts == 16) msg += "; further ones are logged at trace level";
      TPLOG(WARN, STORE) << msg;
    } else {
      TPLOG(TRACE, STORE) << msg;
    }
    close_conn(*c, "");
  }
  return -1;
}

void TCPStoreServer::Impl::SockAddr_to_text(const sockaddr_storage& ss, socklen_t len,
                                            std::string* out) {
  net::SockAddr a;
  a.ss = ss;
  a.len = len;
  *out = a.str();
}

void TCPStoreServer::Impl::close_conn(Conn& c, const std::string& why) {
  if (c.dead) return;
  c.dead = true;
  if (!why.empty()) {
    TPLOG(INFO, STORE) << "TCPStore server " << addr << ": closing " << c.peer
                       << (c.client.empty() ? "" : " (" + c.client + ")") << ": " << why;
  }
  drop_parked(c);
  ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
  graveyard.push_back(c.fd);
  if (c.hello) --clients;
  --open_conns;
  conn_count.store(open_conns, std::memory_order_relaxed);
}

void TCPStoreServer::Impl::bury_dead() {
  for (int fd : graveyard) {
    ::close(fd);
    conns[fd].reset();
  }
  graveyard.clear();
}

void TCPStoreServer::Impl::update_events(Conn& c) {
  uint32_t want = EPOLLRDHUP;
  if (!c.paused) want |= EPOLLIN;
  if (c.out.size() > c.out_pos) want |= EPOLLOUT;
  if (want == c.ev_mask) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.fd = c.fd;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
  c.ev_mask = want;
}

void TCPStoreServer::Impl::mark_dirty(Conn& c) {
  if (c.dirty) return;
  c.dirty = true;
  dirty.push_back({c.fd, c.id});
}

void TCPStoreServer::Impl::flush_dirty() {
  for (size_t i = 0; i < dirty.size(); ++i) {
    auto [fd, id] = dirty[i];
    Conn* c = conns[fd].get();
    if (!c || c->id != id || c->dead) continue;
    c->dirty = false;
    flush(*c);
  }
  dirty.clear();
}

void TCPStoreServer::Impl::flush(Conn& c) {
  while (c.out_pos < c.out.size()) {
    ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      c.paused = c.out.size() - c.out_pos > kOutBacklogLimit;
      update_events(c);
      return;
    }
    close_conn(c, std::string("write failed: ") + std::strerror(errno));
    return;
  }
  c.out.clear();
  c.out_pos = 0;
  if (c.out.capacity() > kShrinkAbove) c.out.shrink_to_fit();
  c.paused = false;
  if (c.close_after_flush) {
    ::shutdown(c.fd, SHUT_WR);
    close_conn(c, "");
    return;
  }
  update_events(c);
}

void TCPStoreServer::Impl::on_readable(Conn& c) {
  if (c.close_after_flush) {
    // Refused: drain and ignore what else it sends until our reply is out.
    uint8_t sink[4096];
    ssize_t n = ::recv(c.fd, sink, sizeof(sink), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) close_conn(c, "");
    return;
  }
  for (int round = 0; round < 4; ++round) {
    if (c.in.cap - c.in.len < 1024) c.in.grow();
    size_t space = c.in.cap - c.in.len;
    ssize_t n = ::recv(c.fd, c.in.data.get() + c.in.len, space, MSG_DONTWAIT);
    if (n == 0) {
      // The client is done sending; answers to what it sent still go out (best effort).
      if (c.out.size() > c.out_pos) {
        ssize_t rc = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos,
                            MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)rc;
      }
      close_conn(c, c.in.len ? "closed in the middle of a frame (" + std::to_string(c.in.len) +
                                   " bytes of it arrived)"
                             : (c.hello || c.asked_local ? "" : "closed before the handshake"));
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      close_conn(c, std::string("read failed: ") + std::strerror(errno));
      return;
    }
    c.in.len += static_cast<size_t>(n);
    process_input(c);
    if (c.dead || c.close_after_flush) return;
    if (static_cast<size_t>(n) < space) return;
  }
}

void TCPStoreServer::Impl::process_input(Conn& c) {
  size_t pos = 0;
  size_t want = 0;  // size of a frame known to be incomplete
  uint8_t* buf = c.in.data.get();
  while (pos < c.in.len) {
    size_t avail = c.in.len - pos;
    if (c.skip > 0) {
      size_t d = static_cast<size_t>(std::min<uint64_t>(c.skip, avail));
      pos += d;
      c.skip -= d;
      continue;
    }
    Header h;
    HeaderStatus st = store_wire::decode_header(buf + pos, avail, limits, &h);
    if (st == HeaderStatus::kNeedMore) break;
    if (st == HeaderStatus::kBadMagic) {
      if (!c.hello) {
        refuse_foreign(c, buf + pos, avail);
      } else {
        reply_error(c, 0, ErrorCode::kBadFrame,
                    "protocol error: frame without the tpcomm store magic after " +
                        std::to_string(c.frames) + " valid frames; closing the connection");
        c.close_after_flush = true;
      }
      break;
    }
    if (st == HeaderStatus::kBadVersion) {
      TPLOG(WARN, STORE) << "TCPStore server " << addr << ": refused " << c.peer
                         << ": protocol version " << int(h.version) << ", server speaks "
                         << int(store_wire::kVersion);
      reply_error(c, h.id, ErrorCode::kVersion,
                  "TCPStore server " + addr + " speaks protocol version " +
                      std::to_string(store_wire::kVersion) + " but the client sent version " +
                      std::to_string(h.version) +
                      "; use the same tpcomm version for the server and every rank");
      c.close_after_flush = true;
      break;
    }
    if (st == HeaderStatus::kTooLarge) {
      std::string what =
          store_wire::is_request_op(h.op) ? store_wire::op_name(static_cast<Op>(h.op)) : "request";
      reply_error(c, h.id, ErrorCode::kTooLarge,
                  what + ": request of " + std::to_string(h.length) +
                      " bytes exceeds the server's limit TPCOMM_STORE_MAX_VALUE=" +
                      std::to_string(cfg.max_value) +
                      " bytes (plus the key); store less, or raise TPCOMM_STORE_MAX_VALUE on "
                      "the server");
      TPLOG(WARN, STORE) << "TCPStore server " << addr << ": " << c.peer << " sent a frame of "
                         << h.length << " bytes (limit " << limits.max_payload() << ")";
      if (!c.hello || h.length >= store_wire::kAbsurdLength) {
        c.close_after_flush = true;
        break;
      }
      c.skip = h.length;
      pos += store_wire::kHeaderSize;
      continue;
    }
    size_t frame = store_wire::kHeaderSize + static_cast<size_t>(h.length);
    if (avail < frame) {
      want = frame;
      break;
    }
    handle_frame(c, h, buf + pos + store_wire::kHeaderSize);
    ++c.frames;
    pos += frame;
    if (c.dead || c.close_after_flush) break;
  }
  if (c.dead) return;
  if (c.close_after_flush) {
    c.in.clear();
    return;
  }
  c.in.consume(pos);
  c.in.want = want;
}

void TCPStoreServer::Impl::refuse_foreign(Conn& c, const uint8_t* p, size_t n) {
  std::string text = store_wire::printable_prefix(p, n);
  bool http = n >= 4 && (std::memcmp(p, "GET ", 4) == 0 || std::memcmp(p, "POST", 4) == 0 ||
                         std::memcmp(p, "HEAD", 4) == 0 || std::memcmp(p, "PUT ", 4) == 0);
  TPLOG(WARN, STORE) << "TCPStore server " << addr << ": refused connection from " << c.peer
                     << ": not a tpcomm store client (first bytes '" << text << "'"
                     << (http ? ", an HTTP request" : "")
                     << "); is another program (a PyTorch TCPStore client, a browser) "
                        "pointed at this port?";
  if (http) {
    static const char kBody[] = "This port serves a tpcomm TCPStore (binary protocol), not HTTP.\n";
    std::string resp = "HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: " +
                       std::to_string(sizeof(kBody) - 1) + "\r\nConnection: close\r\n\r\n" + kBody;
    c.out.insert(c.out.end(), resp.begin(), resp.end());
  }
  c.close_after_flush = true;
  mark_dirty(c);
}

void TCPStoreServer::Impl::reply_error(Conn& c, uint32_t id, ErrorCode code,
                                       const std::string& msg) {
  store_wire::encode_error(&c.out, id, code, msg);
  mark_dirty(c);
}

void TCPStoreServer::Impl::handle_hello(Conn& c, const Header& h, const uint8_t* payload) {
  store_wire::DecodeError derr;
  if (h.op != static_cast<uint8_t>(Op::kHello) ||
      !store_wire::decode_request(h, payload, limits, &req, &derr)) {
    std::string why = h.op != static_cast<uint8_t>(Op::kHello)
                          ? "the first frame must be a hello, got op " + std::to_string(h.op)
                          : derr.message;
    TPLOG(WARN, STORE) << "TCPStore server " << addr << ": refused " << c.peer << ": " << why;
    reply_error(c, h.id, ErrorCode::kBadFrame, "TCPStore server " + addr + ": " + why);
    c.close_after_flush = true;
    return;
  }
  c.client = std::string(req.client);
  if (req.job_id != cfg.job_id) {
    TPLOG(WARN, STORE) << "TCPStore server " << addr << ": refused " << c.peer << " (" << c.client
                       << "): it belongs to job '" << req.job_id << "', this store serves job '"
                       << cfg.job_id << "'";
    reply_error(c, h.id, ErrorCode::kJobMismatch,
                "the TCPStore at " + addr + " serves job '" + cfg.job_id +
                    "' but this client belongs to job '" + std::string(req.job_id) +
                    "'; another job's store is on this port, or TPCOMM_JOB_ID (or "
                    "TCPStoreOptions::job_id) differs between the ranks and the server");
    c.close_after_flush = true;
    return;
  }
  if (clients >= cfg.max_clients) {
    TPLOG(WARN, STORE) << "TCPStore server " << addr << ": refused " << c.peer << " (" << c.client
                       << "): " << clients << " clients already connected";
    reply_error(c, h.id, ErrorCode::kTooManyClients,
                "the TCPStore at " + addr + " already serves " + std::to_string(clients) +
                    " clients, its limit TPCOMM_STORE_MAX_CLIENTS=" +
                    std::to_string(cfg.max_clients) + "; raise it on the server");
    c.close_after_flush = true;
    return;
  }
  std::string note;
  if (!secret.empty() && !authenticate(c, h.id, &note)) return;
  if (req.hello_flags & store_wire::kHelloAskLocal) {
    // Only asking where the local socket is: answer, and wait for the real hello (here, or
    // on the local socket, after which the client closes this connection).
    c.asked_local = true;
    store_wire::Writer w(&c.out);
    w.begin(Op::kHelloOk, h.id);
    w.str(self_desc + note);
    w.u64(cfg.max_key);
    w.u64(cfg.max_value);
    w.str(local_name);
    w.end();
    mark_dirty(c);
    return;
  }
  c.hello = true;
  ++clients;
  if (!(req.hello_flags & store_wire::kHelloSelf)) {
    std::lock_guard<std::mutex> lk(join_mu);
    ++joined;
    join_cv.notify_all();
  }
  TPLOG(INFO, STORE) << "TCPStore server " << addr << ": client " << c.client << " joined from "
                     << c.peer << " (" << clients << " connected)";
  store_wire::Writer w(&c.out);
  w.begin(Op::kHelloOk, h.id);
  w.str(self_desc + note);
  w.u64(cfg.max_key);
  w.u64(cfg.max_value);
  w.str(std::string_view());
  w.end();
  mark_dirty(c);
}

bool TCPStoreServer::Impl::authenticate(Conn& c, uint32_t req_id, std::string* note) {
  if (!c.challenged) {
    c.challenged = true;
    c.nonce = auth::make_nonce();
    reply_error(c, req_id, ErrorCode::kAuthRequired,
                "the TCPStore at " + addr +
                    " requires the job's shared secret (set TPCOMM_AUTH_SECRET or "
                    "TPCOMM_AUTH_SECRET_FILE to the same value on the server and every client) "
                    "[challenge " +
                    auth::hex(c.nonce) + "]");
    return false;
  }
  c.challenged = false;  // a later hello on this connection gets a fresh challenge
  const std::string tag = " [response ";
  size_t at = c.client.rfind(tag);
  std::array<uint8_t, 16> theirs{};
  crypto::Digest got{};
  std::string_view rest = at == std::string::npos
                              ? std::string_view()
                              : std::string_view(c.client).substr(at + tag.size());
  bool ok =
      rest.size() == 32 + 64 + 1 && rest.back() == ']' && auth::unhex(rest.substr(0, 32), theirs) &&
      auth::unhex(rest.substr(32, 64), got) &&
      crypto::digest_equal(got, auth::proof(secret, "store-client", cfg.job_id, c.nonce, theirs));
  if (at != std::string::npos) c.client.resize(at);
  if (!ok) {
    TPLOG(WARN, STORE) << "TCPStore server " << addr << ": refused " << c.peer << " (" << c.client
                       << "): it failed the shared-secret challenge (TPCOMM_AUTH_SECRET)";
    reply_error(c, req_id, ErrorCode::kAuthFailed,
                "the TCPStore at " + addr +
                    " refused this client: it failed the shared-secret challenge (its "
                    "TPCOMM_AUTH_SECRET differs from the server's)");
    c.close_after_flush = true;
    return false;
  }
  *note = " [proof " + auth::hex(auth::proof(secret, "store-server", cfg.job_id, theirs, c.nonce)) +
          "]";
  return true;
}

void TCPStoreServer::Impl::shutdown_all() {
  for (auto& cp : conns) {
    if (!cp || cp->dead) continue;
    Conn& c = *cp;
    // Tell parked waiters why their answer will never come, then close (best effort).
    for (auto& [req_id, wid] : c.parked) {
      reply_error(c, req_id, ErrorCode::kShuttingDown,
                  "the TCPStore server at " + addr +
                      " is shutting down (its process is "
                      "exiting) while this request waited");
    }
    if (c.out.size() > c.out_pos) {
      ssize_t rc = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos,
                          MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)rc;
    }
    close_conn(c, "");
  }
  bury_dead();
  dirty.clear();
  waiters.clear();
  watch.clear();
}

// ---- public wrapper -----------------------------------------------------------------------------

TCPStoreServer::TCPStoreServer(const TCPStoreServerConfig& config)
    : impl_(std::make_unique<Impl>(config)) {}

TCPStoreServer::~TCPStoreServer() = default;

uint16_t TCPStoreServer::port() const { return impl_->bound_port; }

std::string TCPStoreServer::address() const { return impl_->addr; }

std::string TCPStoreServer::local_socket_name() const { return impl_->local_name; }

int TCPStoreServer::workers_joined() const {
  std::lock_guard<std::mutex> lk(impl_->join_mu);
  return impl_->joined;
}

int TCPStoreServer::connections() const {
  return impl_->conn_count.load(std::memory_order_relaxed);
}

void TCPStoreServer::wait_for_workers(int n, Deadline deadline, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(impl_->join_mu);
  while (impl_->joined < n) {
    if (deadline.is_never()) {
      impl_->join_cv.wait(lk);
      continue;
    }
    if (deadline.expired() ||
        impl_->join_cv.wait_until(lk, deadline.when()) == std::cv_status::timeout) {
      if (impl_->joined >= n) break;
      throw TimeoutError("TCPStore master at " + impl_->addr + ": only " +
                         std::to_string(impl_->joined) + " of " + std::to_string(n) +
                         " expected clients connected within " + std::to_string(timeout.count()) +
                         " ms; are all ranks started, with the same MASTER_ADDR/MASTER_PORT, "
                         "world size and job id?");
    }
  }
}

void TCPStoreServer::stop() { impl_->stop(); }

}  // namespace tpcomm
