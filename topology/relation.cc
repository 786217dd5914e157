// Relations between devices, computed from the bridge chains recorded at discovery.
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "topology/topology.h"
#include "tpcomm/error.hpp"

namespace tpcomm::topo {

const char* relation_name(Relation r) {
  switch (r) {
    case Relation::LOC:
      return "LOC";
    case Relation::PIX:
      return "PIX";
    case Relation::PXB:
      return "PXB";
    case Relation::PHB:
      return "PHB";
    case Relation::NODE:
      return "NODE";
    case Relation::SYS:
      return "SYS";
  }
  return "?";
}

const char* relation_phrase(Relation r) {
  switch (r) {
    case Relation::LOC:
      return "are the same device";
    case Relation::PIX:
      return "share a PCIe switch";
    case Relation::PXB:
      return "share a tree of PCIe switches";
    case Relation::PHB:
      return "share a PCIe host bridge but no switch";
    case Relation::NODE:
      return "are on different host bridges of one CPU package";
    case Relation::SYS:
      return "cross the inter-socket link";
  }
  return "?";
}

std::optional<Relation> parse_relation(std::string_view s) {
  std::string u;
  for (char c : s) u.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  for (Relation r :
       {Relation::LOC, Relation::PIX, Relation::PXB, Relation::PHB, Relation::NODE, Relation::SYS})
    if (u == relation_name(r)) return r;
  return std::nullopt;
}

namespace {

bool is_host_bridge(const std::string& id) { return id.find('[') != std::string::npos; }

Relation by_locality(int pkg_a, int numa_a, int pkg_b, int numa_b) {
  if (pkg_a >= 0 && pkg_a == pkg_b) return Relation::NODE;
  if (pkg_a < 0 && pkg_b < 0 && numa_a >= 0 && numa_a == numa_b) return Relation::NODE;
  return Relation::SYS;
}

}  // namespace

Relation pci_relation(const PciDevice& a, const PciDevice& b) {
  if (!a.busid.empty() && a.busid == b.busid) return Relation::LOC;
  size_t k = 0;
  while (k < a.path.size() && k < b.path.size() && a.path[k] == b.path[k]) ++k;
  if (k == 0) return by_locality(a.package, a.numa, b.package, b.numa);
  if (is_host_bridge(a.path[k - 1])) return Relation::PHB;
  // The deepest shared element is a PCI bridge (a switch port). One hop below it on either
  // side is one switch (its downstream ports), as nvidia-smi and NCCL count it.
  size_t below = std::max(a.path.size() - k, b.path.size() - k);
  return below <= 1 ? Relation::PIX : Relation::PXB;
}

const NumaNode* Topology::find_numa(int os_index) const {
  for (const NumaNode& n : numa_nodes)
    if (n.os_index == os_index) return &n;
  return nullptr;
}

Relation numa_relation(const Topology& t, int numa, const PciDevice& dev) {
  if (numa < 0) return Relation::SYS;
  if (dev.numa == numa) return Relation::PHB;
  const NumaNode* n = t.find_numa(numa);
  if (n && n->package >= 0 && n->package == dev.package) return Relation::NODE;
  return Relation::SYS;
}

std::vector<int> parse_cpu_list(std::string_view list) {
  std::vector<int> out;
  size_t pos = 0;
  auto bad = [&](const char* why) {
    throw InvalidArgument("CPU list '" + std::string(list) + "' is malformed: " + why +
                          " (expected e.g. '0-3,8,10-11')");
  };
  auto number = [&](int* v) {
    auto [p, ec] = std::from_chars(list.data() + pos, list.data() + list.size(), *v);
    if (ec != std::errc() || *v < 0 || *v > (1 << 20)) bad("expected a CPU number");
    pos = static_cast<size_t>(p - list.data());
  };
  while (pos < list.size()) {
    int lo = 0, hi = 0;
    number(&lo);
    hi = lo;
    if (pos < list.size() && list[pos] == '-') {
      ++pos;
      if (pos == list.size() || list[pos] == ',')
        hi = lo + 1023;  // "N-": open-ended
      else
        number(&hi);
    }
    if (hi < lo) bad("range ends before it starts");
    if (hi - lo > (1 << 16)) bad("range too large");
    for (int c = lo; c <= hi; ++c) out.push_back(c);
    if (pos < list.size()) {
      if (list[pos] != ',') bad("expected ','");
      ++pos;
      if (pos == list.size()) bad("trailing ','");
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int numa_of_cpus(const Topology& t, const std::vector<int>& cpus) {
  if (cpus.empty()) return -1;
  for (const NumaNode& n : t.numa_nodes) {
    std::vector<int> mine = parse_cpu_list(n.cpuset);
    if (std::all_of(cpus.begin(), cpus.end(),
                    [&](int c) { return std::binary_search(mine.begin(), mine.end(), c); }))
      return n.os_index;
  }
  return -1;
}

std::vector<int> current_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

bool gpus_peer_reachable(const Gpu& a, const Gpu& b, std::string* why) {
  auto say = [&](std::string s) {
    if (why) *why = std::move(s);
  };
  if (a.pci.busid == b.pci.busid) return say("same GPU"), true;
  if (std::find(a.nvlink_peers.begin(), a.nvlink_peers.end(), b.pci.busid) != a.nvlink_peers.end())
    return say("NVLink"), true;
  if (a.nvswitch && b.nvswitch) return say("NVLink through NVSwitch"), true;
  Relation r = pci_relation(a.pci, b.pci);
  if (r <= Relation::PXB) return say(std::string("PCIe ") + relation_name(r)), true;
  say(std::string("PCIe ") + relation_name(r) + ": the GPUs " + relation_phrase(r) +
      ", no peer access");
  return false;
}

}  // namespace tpcomm::topo
