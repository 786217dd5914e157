// Interface selection for the tcp transport, with NCCL_SOCKET_IFNAME's syntax: a
// comma-separated list of name prefixes; '^' first excludes the listed ones; '=' first
// requires exact names ("^=docker0", "eth,ib", "=eth0").
#pragma once

#include <string>
#include <vector>

#include "net/socket.h"

namespace tpcomm::tcp {

/// True when `name` is selected by `spec` (an empty spec selects everything).
bool ifname_matches(const std::string& spec, const std::string& name);

/// An address of a local interface.
struct IfAddr {
  std::string ifname;
  net::SockAddr addr;
  std::string ip;  ///< numeric, without port or brackets
};

/// Up interfaces with an IPv4 or IPv6 address (IPv6 link-local addresses skipped), in the
/// order getifaddrs gives; family AF_INET, AF_INET6 or AF_UNSPEC.
std::vector<IfAddr> local_interfaces(int family);

/// The interfaces the transport uses: `spec` if non-empty; else everything but docker* and
/// lo*, falling back to lo when nothing else exists. Throws InvalidArgument (listing the
/// interfaces found) when the spec selects none.
std::vector<IfAddr> select_interfaces(const std::string& spec, int family);

}  // namespace tpcomm::tcp
