// Registration of the tcp transport: its TPCOMM_SOCKET_* variables and its factory.
#include <sys/socket.h>

#include "core/config.h"
#include "core/log.h"
#include "tpcomm/transport/transport.hpp"
#include "transports/tcp/device.h"

namespace tpcomm::tcp {
namespace {

using config::Param;
using T = config::Type;

// clang-format off
constexpr Param kParams[] = {
  {"TPCOMM_SOCKET_ADDR", T::String, "", "",
   "tcp transport: local IP address to listen on and connect from (overrides "
   "TPCOMM_SOCKET_IFNAME), e.g. 127.0.0.2 to give a rank its own loopback address.", "tcp"},
  {"TPCOMM_SOCKET_BUFSIZE", T::Size, "0", "",
   "tcp transport: SO_SNDBUF/SO_RCVBUF of data sockets; 0 keeps the kernel's auto-tuning; "
   "values below 64K are raised to 64K (smaller windows stall in TCP's zero-window probes).",
   "tcp"},
  {"TPCOMM_SOCKET_CONGESTION", T::String, "auto", "",
   "tcp transport: TCP congestion control of its sockets. 'auto': reno for connections within "
   "this host (loopback: no loss, and BBR's pacing cost 30% of loopback bandwidth here), the "
   "system's default for the others; 'system': never set; a name (cubic, bbr, reno...): every "
   "socket.", "tcp"},
  {"TPCOMM_SOCKET_FAMILY", T::Enum, "any", "any|ipv4|ipv6|AF_INET|AF_INET6",
   "tcp transport: address family of the interfaces it uses (as NCCL_SOCKET_FAMILY).", "tcp"},
  {"TPCOMM_SOCKET_FRAME", T::Size, "1M", "",
   "tcp transport: largest piece of a put written in one go; puts are spread over the "
   "sockets of a peer in pieces of at most this size.", "tcp"},
  {"TPCOMM_SOCKET_IFNAME", T::String, "", "",
   "tcp transport: interfaces to use, as NCCL_SOCKET_IFNAME: comma-separated name prefixes, "
   "'^' first to exclude, '=' first for exact names (e.g. 'eth', '^docker,lo', '=eth0'). "
   "Default: all but docker* and lo*, else lo.", "tcp"},
  {"TPCOMM_SOCKET_NSOCKS", T::Int, "0", "0..16",
   "tcp transport: sockets per peer and direction that carry puts (large messages), striped "
   "over them; each peer also gets one socket for messages only. 0 (auto): 1 to a peer on "
   "this host (a loopback address or this rank's own: a second socket only adds work for the "
   "same cores), 2 to the others.", "tcp"},
  {"TPCOMM_SOCKET_POLL_EVERY", T::Int, "8", "1..1024",
   "tcp transport: while messages keep arriving on one socket and nothing else is busy, "
   "progress() reads that socket directly and polls every socket only every Nth round (one "
   "system call per spinning round instead of two); 1 polls every socket every round.", "tcp"},
};
// clang-format on

}  // namespace

// The smallest socket buffer TPCOMM_SOCKET_BUFSIZE may ask for.
constexpr uint64_t kMinBufsize = 64 * 1024;

Options Options::from_env() {
  Options o;
  o.nsocks = static_cast<int>(config::get_int("TPCOMM_SOCKET_NSOCKS"));
  o.congestion = config::get_string("TPCOMM_SOCKET_CONGESTION");
  if (o.congestion.empty()) o.congestion = "auto";
  o.ifname = config::get_string("TPCOMM_SOCKET_IFNAME");
  o.addr = config::get_string("TPCOMM_SOCKET_ADDR");
  std::string fam = config::get_enum("TPCOMM_SOCKET_FAMILY");
  o.family = fam == "ipv4" || fam == "af_inet"    ? AF_INET
             : fam == "ipv6" || fam == "af_inet6" ? AF_INET6
                                                  : AF_UNSPEC;
  o.bufsize = config::get_size("TPCOMM_SOCKET_BUFSIZE");
  if (o.bufsize > 0 && o.bufsize < kMinBufsize) {
    // Measured on loopback: 4 KiB buffers stalled a transfer for over 30 s (TCP's persist
    // timer probing a zero window), 16 KiB and above moved.
    TPLOG(WARN, TCP) << "TPCOMM_SOCKET_BUFSIZE=" << o.bufsize << " is below " << kMinBufsize
                     << " bytes, where transfers stall in TCP's zero-window probing; using "
                     << kMinBufsize;
    o.bufsize = kMinBufsize;
  }
  o.frame = std::max<uint64_t>(64 * 1024, config::get_size("TPCOMM_SOCKET_FRAME"));
  o.poll_every = static_cast<int>(config::get_int("TPCOMM_SOCKET_POLL_EVERY"));
  return o;
}

}  // namespace tpcomm::tcp

namespace tpcomm::transport {

void register_tcp_transport() {
  config::register_params(tcp::kParams);
  register_transport("tcp", [](const TransportContext& ctx) -> std::unique_ptr<Transport> {
    return std::make_unique<tcp::TcpTransport>(ctx, tcp::Options::from_env());
  });
}

}  // namespace tpcomm::transport
