// Socket helpers: resolution, listening, connecting with retry, deadline-bound reads and writes.
#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/config.h"
#include "core/log.h"
#include "tpcomm/error.hpp"

namespace tpcomm::net {

namespace {

std::string errno_text(int err) { return std::string(std::strerror(err)); }

// Strips the brackets of "[::1]".
std::string unbracket(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    return host.substr(1, host.size() - 2);
  return host;
}

// Errors after which connect_to tries again: the server may still be starting.
bool retryable_connect_error(int err) {
  return err == ECONNREFUSED || err == ENETUNREACH || err == EHOSTUNREACH || err == ETIMEDOUT ||
         err == EAGAIN || err == ECONNRESET || err == ECONNABORTED;
}

// Waits for `events` on fd until the deadline; returns false on timeout.
bool wait_for(int fd, short events, const Deadline& deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.poll_timeout_ms());
    if (rc > 0) return true;
    if (rc == 0) {
      if (deadline.expired()) return false;
      continue;
    }
    if (errno == EINTR) continue;
    throw TransportError("poll() failed: " + errno_text(errno));
  }
}

// One connection attempt to one address: returns the socket, or -1 with *err set.
int try_connect(const SockAddr& a, const Deadline& deadline, int* err) {
  int fd = ::socket(a.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  Fd guard(fd);
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&a.ss), a.len);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno != EINPROGRESS) {
      *err = errno;
      return -1;
    }
    if (!wait_for(fd, POLLOUT, deadline)) {
      *err = ETIMEDOUT;
      return -1;
    }
    int so = 0;
    socklen_t len = sizeof(so);
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) != 0) so = errno;
    if (so != 0) {
      *err = so;
      return -1;
    }
  }
  set_nonblocking(fd, false);
  set_tcp_options(fd);
  return guard.release();
}

}  // namespace

uint16_t SockAddr::port() const {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

std::string SockAddr::str() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, buf, sizeof(buf));
    return std::string(buf) + ":" + std::to_string(port());
  }
  if (ss.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof(buf));
    return "[" + std::string(buf) + "]:" + std::to_string(port());
  }
  return "<unknown address family " + std::to_string(ss.ss_family) + ">";
}

std::vector<SockAddr> resolve(const std::string& host, uint16_t port) {
  std::string h = unbracket(host);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(h.empty() ? nullptr : h.c_str(), service.c_str(), &hints, &res);
  if (rc == EAI_NONAME || rc == EAI_ADDRFAMILY || rc == EAI_NODATA) {
    // AI_ADDRCONFIG hides loopback-only families on hosts without other interfaces.
    hints.ai_flags = AI_NUMERICSERV;
    rc = ::getaddrinfo(h.empty() ? nullptr : h.c_str(), service.c_str(), &hints, &res);
  }
  if (rc != 0) {
    throw InvalidArgument("cannot resolve host '" + host + "': " + ::gai_strerror(rc) +
                          " (check the host name or use an IP address)");
  }
  std::vector<SockAddr> out;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    SockAddr a;
    std::memcpy(&a.ss, ai->ai_addr, ai->ai_addrlen);
    a.len = ai->ai_addrlen;
    bool dup = false;
    for (const SockAddr& b : out)
      if (b.len == a.len && std::memcmp(&b.ss, &a.ss, a.len) == 0) dup = true;
    if (!dup) out.push_back(a);
  }
  ::freeaddrinfo(res);
  if (out.empty()) throw InvalidArgument("host '" + host + "' has no IPv4 or IPv6 address");
  return out;
}

std::pair<std::string, uint16_t> split_host_port(const std::string& hostport) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("malformed address '" + hostport + "': " + why +
                           " (expected host:port or [ipv6]:port)");
  };
  std::string host, port;
  if (!hostport.empty() && hostport.front() == '[') {
    size_t close = hostport.find(']');
    if (close == std::string::npos) throw bad("missing ']'");
    host = hostport.substr(1, close - 1);
    if (close + 1 >= hostport.size() || hostport[close + 1] != ':') throw bad("missing ':port'");
    port = hostport.substr(close + 2);
  } else {
    size_t colon = hostport.rfind(':');
    if (colon == std::string::npos) throw bad("missing ':port'");
    host = hostport.substr(0, colon);
    if (host.find(':') != std::string::npos) throw bad("IPv6 addresses need brackets");
    port = hostport.substr(colon + 1);
  }
  if (host.empty()) throw bad("empty host");
  if (port.empty() || port.size() > 5) throw bad("bad port");
  uint32_t p = 0;
  for (char c : port) {
    if (c < '0' || c > '9') throw bad("port is not a number");
    p = p * 10 + static_cast<uint32_t>(c - '0');
  }
  if (p > 65535) throw bad("port out of range 0..65535");
  return {host, static_cast<uint16_t>(p)};
}

std::string join_host_port(const std::string& host, uint16_t port) {
  std::string h = unbracket(host);
  if (h.find(':') != std::string::npos) return "[" + h + "]:" + std::to_string(port);
  return h + ":" + std::to_string(port);
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Fd listen_on(const std::string& host, uint16_t port, int backlog, bool nonblocking) {
  std::string h = unbracket(host);
  std::vector<SockAddr> addrs;
  bool any = h.empty() || h == "0.0.0.0" || h == "::" || h == "*";
  if (any) {
    // "" listens on every address, IPv6 dual-stack when available; "0.0.0.0" IPv4 only.
    if (h != "0.0.0.0") {
      SockAddr a6;
      auto* s6 = reinterpret_cast<sockaddr_in6*>(&a6.ss);
      s6->sin6_family = AF_INET6;
      s6->sin6_addr = in6addr_any;
      s6->sin6_port = htons(port);
      a6.len = sizeof(sockaddr_in6);
      addrs.push_back(a6);
    }
    if (h != "::") {
      SockAddr a4;
      auto* s4 = reinterpret_cast<sockaddr_in*>(&a4.ss);
      s4->sin_family = AF_INET;
      s4->sin_addr.s_addr = htonl(INADDR_ANY);
      s4->sin_port = htons(port);
      a4.len = sizeof(sockaddr_in);
      addrs.push_back(a4);
    }
  } else {
    addrs = resolve(h, port);
  }
  std::string last;
  int last_err = 0;
  for (const SockAddr& a : addrs) {
    int type = SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0);
    Fd fd(::socket(a.family(), type, 0));
    if (!fd.valid()) {
      last_err = errno;
      last = "socket(): " + errno_text(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (a.family() == AF_INET6 && any) {
      int zero = 0;
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&a.ss), a.len) != 0) {
      last_err = errno;
      last = "bind(" + a.str() + "): " + errno_text(errno);
      if (errno == EADDRINUSE) break;
      continue;
    }
    if (::listen(fd.get(), backlog) != 0) {
      last_err = errno;
      last = "listen(" + a.str() + "): " + errno_text(errno);
      continue;
    }
    TPLOG(INFO, NET) << "listening on " << local_address(fd.get()).str();
    return fd;
  }
  std::string msg =
      "cannot listen on " + join_host_port(host.empty() ? "*" : host, port) + ": " + last;
  if (last_err == EADDRINUSE) {
    msg += " (port " + std::to_string(port) +
           " is taken by another process; pick another port, or 0 to let the system pick a "
           "free one)";
  } else if (last_err == EADDRNOTAVAIL) {
    msg += " (the address is not one of this machine's interfaces)";
  }
  throw TransportError(msg);
}

SockAddr local_address(int fd) {
  SockAddr a;
  a.len = sizeof(a.ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a.ss), &a.len) != 0)
    throw TransportError("getsockname() failed: " + errno_text(errno));
  return a;
}

SockAddr peer_address(int fd) {
  SockAddr a;
  a.len = sizeof(a.ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a.ss), &a.len) != 0)
    throw TransportError("getpeername() failed: " + errno_text(errno));
  return a;
}

Fd connect_to(const std::string& host, uint16_t port, Deadline deadline,
              std::chrono::milliseconds initial_backoff) {
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  if (initial_backoff.count() < 0)
    initial_backoff = config::get_duration("TPCOMM_STORE_CONNECT_RETRY");
  auto backoff = std::max(initial_backoff, std::chrono::milliseconds(1));
  const auto kMaxBackoff = std::chrono::milliseconds(1000);
  std::string last_error = "none";
  int attempts = 0;
  while (true) {
    std::vector<SockAddr> addrs;
    try {
      addrs = resolve(host, port);
    } catch (const InvalidArgument& e) {
      // A name that does not resolve yet (a container still starting) is retried too, but
      // only when the resolver says "try again"; a typo fails at once.
      addrinfo* res = nullptr;
      addrinfo hints{};
      hints.ai_socktype = SOCK_STREAM;
      int rc = ::getaddrinfo(unbracket(host).c_str(), nullptr, &hints, &res);
      if (res) ::freeaddrinfo(res);
      if (rc != EAI_AGAIN) throw;
      last_error = e.what();
    }
    for (const SockAddr& a : addrs) {
      ++attempts;
      int err = 0;
      int fd = try_connect(a, deadline, &err);
      if (fd >= 0) {
        TPLOG(INFO, NET) << "connected to " << a.str() << " after " << attempts << " attempt(s)";
        return Fd(fd);
      }
      last_error = a.str() + ": " + errno_text(err);
      if (!retryable_connect_error(err)) {
        throw TransportError("cannot connect to " + join_host_port(host, port) + " (" + last_error +
                             ")");
      }
    }
    auto left = deadline.remaining();
    if (deadline.expired() || left.count() <= 0) break;
    std::this_thread::sleep_for(std::min(backoff, left));
    backoff = std::min(backoff * 2, kMaxBackoff);
    if (deadline.expired()) break;
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  throw TimeoutError("cannot reach " + join_host_port(host, port) + " after " + std::to_string(ms) +
                     " ms (last error: " + last_error + "; " + std::to_string(attempts) +
                     " attempts); is the server running and the address right?");
}

void set_nonblocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0) throw TransportError("fcntl(F_GETFL) failed: " + errno_text(errno));
  int want = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (want != flags && ::fcntl(fd, F_SETFL, want) != 0)
    throw TransportError("fcntl(F_SETFL) failed: " + errno_text(errno));
}

void set_tcp_options(int fd, int sndbuf, int rcvbuf) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (sndbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
}

void write_all(int fd, const void* buf, size_t len, Deadline deadline, const std::string& what) {
  const char* p = static_cast<const char*>(buf);
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::send(fd, p + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLOUT, deadline)) {
        throw TimeoutError("timed out writing to " + what + " (" + std::to_string(done) + " of " +
                           std::to_string(len) + " bytes sent; the peer is not reading)");
      }
      continue;
    }
    int err = n < 0 ? errno : EPIPE;
    throw PeerError("connection to " + what + " lost while writing (" + errno_text(err) + ", " +
                    std::to_string(done) + " of " + std::to_string(len) + " bytes sent)");
  }
}

void read_all(int fd, void* buf, size_t len, Deadline deadline, const std::string& what) {
  char* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::recv(fd, p + done, len - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      throw PeerError("connection to " + what + " closed by the peer after " +
                      std::to_string(done) + " of " + std::to_string(len) + " bytes");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(fd, POLLIN, deadline)) {
        throw TimeoutError("timed out reading from " + what + " (" + std::to_string(done) + " of " +
                           std::to_string(len) + " bytes arrived)");
      }
      continue;
    }
    throw PeerError("connection to " + what + " lost while reading (" + errno_text(errno) + ", " +
                    std::to_string(done) + " of " + std::to_string(len) + " bytes arrived)");
  }
}

uint16_t pick_free_port(const std::string& host) {
  Fd fd = listen_on(host, 0, 1, false);
  return local_address(fd.get()).port();
}

std::string hostname() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return std::string(buf);
}

}  // namespace tpcomm::net
