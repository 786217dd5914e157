// Thin, deadline-aware socket helpers shared by the TCPStore, the tcp transport and tprun.
// Every blocking helper takes a Deadline and throws TimeoutError (naming the peer) when it
// passes; errors name the address and the errno text. IPv4 and IPv6.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/deadline.h"

namespace tpcomm::net {

/// A resolved socket address (IPv4 or IPv6).
struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family() const { return ss.ss_family; }
  uint16_t port() const;
  /// "127.0.0.1:29500" or "[::1]:29500".
  std::string str() const;
};

/// Resolves host (name, IPv4 or IPv6 literal, optionally in brackets) and port. Throws
/// InvalidArgument naming the host when it does not resolve.
std::vector<SockAddr> resolve(const std::string& host, uint16_t port);

/// Splits "host:port", "[v6]:port" into parts; throws InvalidArgument on a malformed string.
std::pair<std::string, uint16_t> split_host_port(const std::string& hostport);

/// Joins host and port for messages: "host:29500", "[::1]:29500" (brackets added for IPv6).
std::string join_host_port(const std::string& host, uint16_t port);

/// An owned file descriptor (closed on destruction; movable).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

/// Listens on host:port (port 0 picks a free one; host "" or "0.0.0.0"/"::" for all). Sets
/// SO_REUSEADDR, CLOEXEC, non-blocking when asked. Throws TransportError naming the address
/// (EADDRINUSE says which port is taken and that 0 picks a free one).
Fd listen_on(const std::string& host, uint16_t port, int backlog, bool nonblocking);

/// Local address of a bound socket.
SockAddr local_address(int fd);
/// Peer address of a connected socket.
SockAddr peer_address(int fd);

/// Connects to host:port, retrying refused/unreachable attempts with back-off until the
/// deadline (a server that is still starting). The back-off starts at initial_backoff
/// (negative: TPCOMM_STORE_CONNECT_RETRY) and doubles up to 1 s. Returns a blocking socket
/// with TCP_NODELAY. Throws TimeoutError "cannot reach host:port after N ms (last error:
/// ...)", TransportError for errors that retrying cannot fix.
Fd connect_to(const std::string& host, uint16_t port, Deadline deadline,
              std::chrono::milliseconds initial_backoff = std::chrono::milliseconds(-1));

/// Sets O_NONBLOCK on or off.
void set_nonblocking(int fd, bool on);
/// Sets TCP_NODELAY (and optionally buffer sizes when > 0).
void set_tcp_options(int fd, int sndbuf = 0, int rcvbuf = 0);

/// Writes all of buf (blocking or non-blocking fd), waiting with poll() until the deadline.
/// Throws PeerError on a closed connection, TimeoutError at the deadline. `what` names the
/// peer in messages.
void write_all(int fd, const void* buf, size_t len, Deadline deadline, const std::string& what);
/// Reads exactly len bytes. Same errors; EOF before len bytes is a PeerError saying how many
/// bytes of how many arrived.
void read_all(int fd, void* buf, size_t len, Deadline deadline, const std::string& what);

/// Picks a currently free TCP port on host (bind to 0, read it, close). Racy by nature: use
/// only where the port is handed to a child that binds it immediately.
uint16_t pick_free_port(const std::string& host = "127.0.0.1");

/// Host name of this machine.
std::string hostname();

}  // namespace tpcomm::net
