#include "transports/tcp/ifname.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <cstring>

#include "tpcomm/error.hpp"

namespace tpcomm::tcp {

bool ifname_matches(const std::string& spec_in, const std::string& name) {
  std::string spec = spec_in;
  bool exclude = false, exact = false;
  if (!spec.empty() && spec[0] == '^') {
    exclude = true;
    spec.erase(0, 1);
  }
  if (!spec.empty() && spec[0] == '=') {
    exact = true;
    spec.erase(0, 1);
  }
  bool any_item = false, hit = false;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(',', start);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    any_item = true;
    if (exact ? name == item : name.compare(0, item.size(), item) == 0) hit = true;
  }
  if (!any_item) return true;
  return exclude ? !hit : hit;
}

std::vector<IfAddr> local_interfaces(int family) {
  std::vector<IfAddr> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    int f = i->ifa_addr->sa_family;
    if (f != AF_INET && f != AF_INET6) continue;
    if (family != AF_UNSPEC && f != family) continue;
    IfAddr a;
    a.ifname = i->ifa_name;
    char buf[INET6_ADDRSTRLEN] = {};
    if (f == AF_INET) {
      std::memcpy(&a.addr.ss, i->ifa_addr, sizeof(sockaddr_in));
      a.addr.len = sizeof(sockaddr_in);
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    } else {
      auto* s6 = reinterpret_cast<sockaddr_in6*>(i->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr)) continue;
      std::memcpy(&a.addr.ss, s6, sizeof(sockaddr_in6));
      a.addr.len = sizeof(sockaddr_in6);
      inet_ntop(AF_INET6, &s6->sin6_addr, buf, sizeof buf);
    }
    a.ip = buf;
    out.push_back(a);
  }
  freeifaddrs(list);
  return out;
}

std::vector<IfAddr> select_interfaces(const std::string& spec, int family) {
  std::vector<IfAddr> all = local_interfaces(family);
  std::vector<IfAddr> out;
  std::string use = spec.empty() ? "^docker,lo" : spec;
  for (const IfAddr& a : all)
    if (ifname_matches(use, a.ifname)) out.push_back(a);
  if (out.empty() && spec.empty())
    for (const IfAddr& a : all)
      if (ifname_matches("lo", a.ifname)) out.push_back(a);
  if (out.empty()) {
    std::string found;
    for (const IfAddr& a : all) found += " " + a.ifname + "(" + a.ip + ")";
    throw InvalidArgument("TPCOMM_SOCKET_IFNAME='" + spec + "' selects no interface with an " +
                          "address; this host has:" + (found.empty() ? " none" : found));
  }
  return out;
}

}  // namespace tpcomm::tcp
