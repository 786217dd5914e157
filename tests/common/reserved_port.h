// A loopback TCP port held for a test whose server can only bind after the port number is
// known (the clients start first, or the server's constructor blocks until they join).
// Where the test itself binds, bind port 0 and read the port back instead.
//
// The port is bound with SO_REUSEADDR but never listened on, for the life of the object:
//  - the system never hands it out meanwhile (bind to port 0 and connect() skip ports that
//    have a bound socket), unlike a "free port" that is closed again before use;
//  - connections to it are refused until the test's server listens there;
//  - that server may bind it (tpcomm's listen_on sets SO_REUSEADDR, and a bound socket that
//    does not listen is no conflict).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace tpcomm::testing {

/// Holds an unused loopback port (see the file comment) until destroyed.
class ReservedPort {
 public:
  ReservedPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) fail("socket");
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) fail("bind");
    socklen_t len = sizeof(a);
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) fail("getsockname");
    port_ = ntohs(a.sin_port);
  }
  ~ReservedPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;

  /// The held port (on 127.0.0.1).
  uint16_t port() const { return port_; }

 private:
  [[noreturn]] void fail(const char* what) {
    std::string msg = std::string("ReservedPort: ") + what + " failed: " + std::strerror(errno);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(msg);
  }
  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace tpcomm::testing
