// Congestion control of the tcp transport's sockets: see congestion.h.
#include "transports/tcp/congestion.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/log.h"

namespace tpcomm::tcp {

const std::string& system_congestion() {
  static const std::string name = [] {
    std::ifstream f("/proc/sys/net/ipv4/tcp_congestion_control");
    std::string s;
    if (!(f >> s)) s.clear();
    return s;
  }();
  return name;
}

namespace {

bool is_loopback(const net::SockAddr& a) {
  if (a.family() == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a.ss);
    return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  }
  if (a.family() == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a.ss);
    if (IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr)) return true;
    // ::ffff:127.x.y.z
    return IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr) && v6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

bool same_ip(const net::SockAddr& a, const net::SockAddr& b) {
  if (a.family() != b.family()) return false;
  if (a.family() == AF_INET)
    return reinterpret_cast<const sockaddr_in*>(&a.ss)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(&b.ss)->sin_addr.s_addr;
  if (a.family() == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(&a.ss)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(&b.ss)->sin6_addr,
                       sizeof(in6_addr)) == 0;
  return false;
}

}  // namespace

bool same_host(const net::SockAddr& local, const net::SockAddr& peer) {
  return is_loopback(peer) || same_ip(local, peer);
}

bool set_congestion(int fd, const std::string& name, std::string* error) {
  if (::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(),
                   static_cast<socklen_t>(name.size())) == 0)
    return true;
  if (error) *error = std::strerror(errno);
  return false;
}

std::string congestion_of(int fd) {
  char buf[32] = {};
  socklen_t len = sizeof buf;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, buf, &len) != 0) return "";
  return std::string(buf, strnlen(buf, len));
}

}  // namespace tpcomm::tcp
