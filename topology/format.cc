// The compact tree tpinfo prints and the library logs.
#include <cstdio>
#include <sstream>

#include "topology/topology.h"

namespace tpcomm::topo {

namespace {

std::string short_bus(const std::string& id) {
  return id.rfind("0000:", 0) == 0 ? id.substr(5) : id;
}

// "hb 48-4e > 48:01.0 > 49:00.0": the host bridge by its bus range, then the bridges below.
std::string path_text(const PciDevice& d) {
  std::string out;
  for (const std::string& p : d.path) {
    std::string e = short_bus(p);
    if (e.find('[') != std::string::npos) {
      std::string inner;
      for (char c : e)
        if (c != '[' && c != ']') inner.push_back(c);
      e = "hb " + inner;
    }
    out += (out.empty() ? "" : " > ") + e;
  }
  return out.empty() ? "" : "  [" + out + "]";
}

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f GiB", static_cast<double>(bytes) / (1u << 30));
  return buf;
}

std::string count(size_t n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

std::string pad(std::string s, size_t n) {
  if (s.size() < n) s.append(n - s.size(), ' ');
  return s;
}

std::string gpu_line(const Topology& t, const Gpu& g) {
  std::string others;
  for (const std::string& d : g.os_devices)
    if (d != g.label()) others += (others.empty() ? "" : " ") + d;
  std::string s = "GPU  " + pad(g.label(), 10) + " " + short_bus(g.pci.busid) + "  " +
                  (g.model.empty() ? g.vendor : g.model);
  if (!others.empty()) s += "  (" + others + ")";
  if (!g.nvlink_peers.empty() || g.nvswitch) {
    s += "  NVLink:";
    if (!g.nvlink_peers.empty()) s += " " + std::to_string(g.nvlink_peers.size()) + " GPUs";
    if (g.nvswitch) s += " NVSwitch";
  }
  return s + path_text(g.pci);
}

std::string nic_line(const Nic& n) {
  std::string s = "NIC  " + pad(n.name, 10) + " " + short_bus(n.pci.busid) + "  " + n.kind;
  for (const NicPort& p : n.ports) {
    s += ", port " + std::to_string(p.number) + " " +
         (p.state == 4   ? "active"
          : p.state == 0 ? "state?"
                         : "DOWN(" + std::to_string(p.state) + ")");
    if (p.rate_gbps > 0) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), " %.0f Gb/s", p.rate_gbps);
      s += buf;
    }
  }
  if (!n.netdevs.empty()) {
    s += "  (net";
    for (const std::string& d : n.netdevs) s += " " + d;
    s += ")";
  }
  return s + path_text(n.pci);
}

std::string net_line(const NetIf& n) {
  return "net  " + pad(n.name, 10) + " " + (n.pci.busid.empty() ? "-" : short_bus(n.pci.busid)) +
         path_text(n.pci);
}

// Devices local to NUMA node `numa` (or, with numa -1, to package `pkg` but no single node;
// with both -1, to nothing known).
void devices(std::ostringstream& os, const Topology& t, int numa, int pkg, const char* indent) {
  auto here = [&](const PciDevice& d) {
    if (numa >= 0) return d.numa == numa;
    return d.numa < 0 && d.package == pkg;
  };
  for (const Gpu& g : t.gpus)
    if (here(g.pci)) os << indent << gpu_line(t, g) << "\n";
  for (const Nic& n : t.nics)
    if (here(n.pci)) os << indent << nic_line(n) << "\n";
  for (const NetIf& n : t.netifs)
    if (n.rdma_device.empty() && here(n.pci)) os << indent << net_line(n) << "\n";
}

}  // namespace

std::string format_tree(const Topology& t) {
  std::ostringstream os;
  os << "Machine " << (t.hostname.empty() ? "?" : t.hostname);
  if (!t.cpu_model.empty()) os << " (" << t.cpu_model << ")";
  os << ": " << count(t.packages.size(), "package") << ", "
     << count(t.numa_nodes.size(), "NUMA node") << ", " << count(t.cores, "core") << ", "
     << count(t.pus, "PU") << ", " << count(t.gpus.size(), "GPU") << ", "
     << count(t.nics.size(), "RDMA device") << "\n";
  os << "  source " << t.source << ", host id " << t.host_id;
  if (!t.hwloc_version.empty()) os << ", hwloc " << t.hwloc_version;
  os << "\n";
  for (const Package& p : t.packages) {
    os << "  Package " << p.os_index << " (cpus " << p.cpuset << ")\n";
    for (const NumaNode& n : t.numa_nodes) {
      if (n.package != p.os_index) continue;
      os << "    NUMA " << n.os_index << " (cpus " << (n.cpuset.empty() ? "none" : n.cpuset) << ", "
         << gib(n.memory_bytes) << ")\n";
      devices(os, t, n.os_index, -1, "      ");
    }
    devices(os, t, -1, p.os_index, "    ");
  }
  bool orphan_numa = false;
  for (const NumaNode& n : t.numa_nodes) {
    if (n.package >= 0) continue;
    if (!orphan_numa) os << "  Outside any package\n";
    orphan_numa = true;
    os << "    NUMA " << n.os_index << " (cpus " << n.cpuset << ", " << gib(n.memory_bytes)
       << ")\n";
    devices(os, t, n.os_index, -1, "      ");
  }
  std::ostringstream rest;
  devices(rest, t, -1, -1, "    ");
  if (!rest.str().empty()) os << "  Not local to one package\n" << rest.str();
  return os.str();
}

}  // namespace tpcomm::topo
