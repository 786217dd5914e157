// hwloc -> Topology. The only file of tpcomm that includes hwloc: everything else works on the
// plain value. Relations between I/O objects are never asked of hwloc (its common-ancestor
// call crashes on I/O objects under different numbers of bridges in 2.9); we record each
// device's bridge chain instead and compare chains (relation.cc).
#include <hwloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/config.h"
#include "core/log.h"
#include "topology/topology.h"
#include "tpcomm/error.hpp"

namespace tpcomm::topo {

namespace {

constexpr size_t kMaxTopologyFile = 64u << 20;

// Owns one hwloc topology.
class Hwloc {
 public:
  Hwloc() {
    if (hwloc_topology_init(&t_) != 0)
      throw TransportError(std::string("hwloc_topology_init failed: ") + std::strerror(errno));
    // The default filter for I/O types drops every bridge, PCI function and OS device.
    hwloc_topology_set_io_types_filter(t_, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  }
  ~Hwloc() { hwloc_topology_destroy(t_); }
  Hwloc(const Hwloc&) = delete;
  Hwloc& operator=(const Hwloc&) = delete;
  hwloc_topology_t get() const { return t_; }

 private:
  hwloc_topology_t t_ = nullptr;
};

std::string bitmap_list(hwloc_const_bitmap_t b) {
  if (!b) return "";
  char* s = nullptr;
  if (hwloc_bitmap_list_asprintf(&s, b) < 0 || !s) return "";
  std::string out(s);
  std::free(s);
  return out;
}

std::string info(hwloc_obj_t o, const char* name) {
  const char* v = o ? hwloc_obj_get_info_by_name(o, name) : nullptr;
  return v ? v : "";
}

std::string busid_of(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%01x", static_cast<unsigned>(p.domain),
                static_cast<unsigned>(p.bus), static_cast<unsigned>(p.dev),
                static_cast<unsigned>(p.func));
  return buf;
}

// A host bridge has no bus id of its own: name it by the bus range below it.
std::string host_bridge_id(hwloc_obj_t b) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%04x:[%02x-%02x]",
                static_cast<unsigned>(b->attr->bridge.downstream.pci.domain),
                static_cast<unsigned>(b->attr->bridge.downstream.pci.secondary_bus),
                static_cast<unsigned>(b->attr->bridge.downstream.pci.subordinate_bus));
  return buf;
}

int trailing_index(std::string_view name, std::string_view prefix) {
  if (name.substr(0, prefix.size()) != prefix || name.size() == prefix.size()) return -1;
  int v = 0;
  for (char c : name.substr(prefix.size())) {
    if (c < '0' || c > '9' || v > 100000) return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

hwloc_obj_t package_of(hwloc_obj_t o) {
  for (; o; o = o->parent)
    if (o->type == HWLOC_OBJ_PACKAGE) return o;
  return nullptr;
}

// Fills the locality (NUMA node, package) and PCI path of an I/O object.
void place(hwloc_topology_t t, hwloc_obj_t pci, PciDevice* d) {
  hwloc_obj_t cpu_side = hwloc_get_non_io_ancestor_obj(t, pci);
  if (cpu_side && cpu_side->nodeset && hwloc_bitmap_weight(cpu_side->nodeset) == 1)
    d->numa = hwloc_bitmap_first(cpu_side->nodeset);
  if (hwloc_obj_t pkg = package_of(cpu_side)) d->package = static_cast<int>(pkg->os_index);
  std::vector<std::string> up;
  for (hwloc_obj_t o = pci->parent; o && o->type == HWLOC_OBJ_BRIDGE; o = o->parent) {
    if (o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST)
      up.push_back(host_bridge_id(o));
    else
      up.push_back(busid_of(o->attr->bridge.upstream.pci));
  }
  d->path.assign(up.rbegin(), up.rend());
}

PciDevice pci_device(hwloc_topology_t t, hwloc_obj_t pci) {
  PciDevice d;
  const auto& a = pci->attr->pcidev;
  d.busid = busid_of(a);
  d.vendor_id = a.vendor_id;
  d.device_id = a.device_id;
  d.class_id = a.class_id;
  d.link_gbs = std::round(static_cast<double>(a.linkspeed) * 100.0) / 100.0;
  place(t, pci, &d);
  return d;
}

bool is_gpu(hwloc_obj_t pci) {
  const auto& a = pci->attr->pcidev;
  return (a.class_id == 0x0302 || a.class_id == 0x0300) &&
         (a.vendor_id == 0x10de || a.vendor_id == 0x1002);
}

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  if (in) std::getline(in, s);
  return s;
}

// Port information hwloc records as "Port<N><Field>" info attributes.
std::vector<NicPort> nic_ports(hwloc_obj_t osdev) {
  std::vector<NicPort> ports;
  auto port = [&](int n) -> NicPort& {
    for (NicPort& p : ports)
      if (p.number == n) return p;
    ports.push_back(NicPort{});
    ports.back().number = n;
    return ports.back();
  };
  for (unsigned i = 0; i < osdev->infos_count; ++i) {
    std::string_view name = osdev->infos[i].name;
    std::string value = osdev->infos[i].value;
    if (name.substr(0, 4) != "Port") continue;
    size_t p = 4;
    int n = 0;
    while (p < name.size() && name[p] >= '0' && name[p] <= '9' && n < 1000)
      n = n * 10 + (name[p++] - '0');
    if (p == 4) continue;
    std::string_view field = name.substr(p);
    if (field == "State")
      port(n).state = std::atoi(value.c_str());
    else if (field == "LID")
      port(n).lid = value;
    else if (field == "GID0")
      port(n).gid0 = value;
    else if (field == "LinkLayer")
      port(n).link_layer = value;
    else if (field == "LMC")
      port(n);
  }
  std::sort(ports.begin(), ports.end(),
            [](const NicPort& a, const NicPort& b) { return a.number < b.number; });
  return ports;
}

// On the real machine, sysfs knows each port's link layer and rate.
void add_sysfs_port_info(Nic* nic) {
  for (NicPort& p : nic->ports) {
    std::string dir = "/sys/class/infiniband/" + nic->name + "/ports/" + std::to_string(p.number);
    std::string ll = read_small_file(dir + "/link_layer");
    if (!ll.empty()) p.link_layer = ll;
    std::string rate = read_small_file(dir + "/rate");  // "100 Gb/sec (4X EDR)"
    if (!rate.empty()) p.rate_gbps = std::atof(rate.c_str());
    std::string state = read_small_file(dir + "/state");  // "4: ACTIVE"
    if (!state.empty()) p.state = std::atoi(state.c_str());
  }
}

void classify_nic(Nic* nic) {
  uint16_t vendor = nic->pci.vendor_id, cls = nic->pci.class_id;
  std::string inferred;
  if (cls == 0x0207 || cls == 0x0c06)
    inferred = "InfiniBand";
  else if (cls == 0x0200)
    inferred = "Ethernet";
  else if (nic->name.rfind("rxe", 0) == 0)
    inferred = "Ethernet";  // soft RoCE
  for (NicPort& p : nic->ports)
    if (p.link_layer.empty()) p.link_layer = inferred;
  std::string ll = nic->ports.empty() ? inferred : nic->ports.front().link_layer;
  if (vendor == 0x1d0f)
    nic->kind = "efa";
  else if (vendor == 0x1425 || nic->name.rfind("siw", 0) == 0 || nic->name.rfind("iw", 0) == 0)
    nic->kind = "iwarp";
  else if (ll == "InfiniBand")
    nic->kind = "ib";
  else if (ll == "Ethernet")
    nic->kind = "roce";
  else
    nic->kind = "unknown";
}

void add_nvlinks(hwloc_topology_t t, Topology* topo) {
  unsigned nr = 0;
  if (hwloc_distances_get_by_name(t, "NVLinkBandwidth", &nr, nullptr, 0) != 0 || nr == 0) return;
  std::vector<hwloc_distances_s*> dist(nr);
  if (hwloc_distances_get_by_name(t, "NVLinkBandwidth", &nr, dist.data(), 0) != 0) return;
  for (unsigned k = 0; k < nr; ++k) {
    hwloc_distances_s* d = dist[k];
    unsigned n = d->nbobjs;
    // Per object: the GPU it is (index in topo->gpus), or -2 for an NVSwitch, or -1.
    std::vector<int> role(n, -1);
    for (unsigned i = 0; i < n; ++i) {
      hwloc_obj_t o = d->objs[i];
      if (o && o->type == HWLOC_OBJ_OS_DEVICE) o = o->parent;
      if (!o || o->type != HWLOC_OBJ_PCI_DEVICE) continue;
      std::string bus = busid_of(o->attr->pcidev);
      const char* sub = o->subtype;
      if (sub && std::string_view(sub) == "NVSwitch") {
        role[i] = -2;
        continue;
      }
      for (size_t g = 0; g < topo->gpus.size(); ++g)
        if (topo->gpus[g].pci.busid == bus) role[i] = static_cast<int>(g);
    }
    for (unsigned i = 0; i < n; ++i) {
      if (role[i] < 0) continue;
      Gpu& gpu = topo->gpus[static_cast<size_t>(role[i])];
      for (unsigned j = 0; j < n; ++j) {
        uint64_t v = d->values[i * n + j];
        if (i == j || v == 0 || role[j] == -1) continue;
        gpu.nvlink_bw += v;
        if (role[j] == -2) {
          gpu.nvswitch = true;
        } else {
          const std::string& peer = topo->gpus[static_cast<size_t>(role[j])].pci.busid;
          if (std::find(gpu.nvlink_peers.begin(), gpu.nvlink_peers.end(), peer) ==
              gpu.nvlink_peers.end())
            gpu.nvlink_peers.push_back(peer);
        }
      }
      std::sort(gpu.nvlink_peers.begin(), gpu.nvlink_peers.end());
    }
    hwloc_distances_release(t, d);
  }
}

// "rdmap79s0" < "rdmap113s0", "mlx5_2" < "mlx5_10": digit runs compare as numbers.
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    bool da = a[i] >= '0' && a[i] <= '9', db = b[j] >= '0' && b[j] <= '9';
    if (da && db) {
      size_t ei = i, ej = j;
      while (ei < a.size() && a[ei] >= '0' && a[ei] <= '9') ++ei;
      while (ej < b.size() && b[ej] >= '0' && b[ej] <= '9') ++ej;
      std::string_view na = std::string_view(a).substr(i, ei - i);
      std::string_view nb = std::string_view(b).substr(j, ej - j);
      while (na.size() > 1 && na[0] == '0') na.remove_prefix(1);
      while (nb.size() > 1 && nb[0] == '0') nb.remove_prefix(1);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ei, j = ej;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

Topology build(hwloc_topology_t t, bool this_system) {
  Topology topo;
  hwloc_obj_t root = hwloc_get_root_obj(t);
  topo.hostname = info(root, "HostName");
  topo.hwloc_version = info(root, "hwlocVersion");
  topo.cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
  topo.pus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);

  for (hwloc_obj_t p = nullptr; (p = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PACKAGE, p));) {
    topo.packages.push_back(Package{static_cast<int>(p->os_index), bitmap_list(p->cpuset)});
    if (topo.cpu_model.empty()) topo.cpu_model = info(p, "CPUModel");
  }
  for (hwloc_obj_t n = nullptr; (n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, n));) {
    NumaNode node;
    node.os_index = static_cast<int>(n->os_index);
    if (hwloc_obj_t pkg = package_of(n)) {
      node.package = static_cast<int>(pkg->os_index);
    } else if (n->cpuset && !hwloc_bitmap_iszero(n->cpuset)) {
      // hwloc 1.x layouts put NUMA nodes above packages: use the package holding its CPUs.
      for (hwloc_obj_t p = nullptr; (p = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PACKAGE, p));)
        if (p->cpuset && hwloc_bitmap_isincluded(n->cpuset, p->cpuset))
          node.package = static_cast<int>(p->os_index);
    }
    node.cpuset = bitmap_list(n->cpuset);
    node.memory_bytes = n->attr ? n->attr->numanode.local_memory : 0;
    topo.numa_nodes.push_back(std::move(node));
  }

  for (hwloc_obj_t pci = nullptr; (pci = hwloc_get_next_pcidev(t, pci));) {
    if (!is_gpu(pci)) continue;
    Gpu g;
    g.pci = pci_device(t, pci);
    g.vendor = pci->attr->pcidev.vendor_id == 0x10de ? "nvidia" : "amd";
    for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
      if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name) continue;
      std::string name = c->name;
      g.os_devices.push_back(name);
      if (int i = trailing_index(name, "cuda"); i >= 0) g.cuda_index = i;
      if (int i = trailing_index(name, "nvml"); i >= 0) g.nvml_index = i;
      if (g.model.empty()) g.model = info(c, "GPUModel");
    }
    if (g.model.empty()) g.model = info(pci, "PCIDevice");
    topo.gpus.push_back(std::move(g));
  }
  std::sort(topo.gpus.begin(), topo.gpus.end(), [](const Gpu& a, const Gpu& b) {
    unsigned ka = static_cast<unsigned>(a.cuda_index), kb = static_cast<unsigned>(b.cuda_index);
    return ka != kb ? ka < kb : a.pci.busid < b.pci.busid;
  });
  add_nvlinks(t, &topo);

  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_osdev(t, o));) {
    if (!o->name) continue;
    hwloc_obj_t pci = o->parent && o->parent->type == HWLOC_OBJ_PCI_DEVICE ? o->parent : nullptr;
    if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
      Nic nic;
      nic.name = o->name;
      if (pci) nic.pci = pci_device(t, pci);
      nic.ports = nic_ports(o);
      if (this_system) add_sysfs_port_info(&nic);
      classify_nic(&nic);
      if (pci)
        for (hwloc_obj_t s = pci->io_first_child; s; s = s->next_sibling)
          if (s->type == HWLOC_OBJ_OS_DEVICE && s->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK &&
              s->name)
            nic.netdevs.push_back(s->name);
      topo.nics.push_back(std::move(nic));
    } else if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK) {
      NetIf nif;
      nif.name = o->name;
      nif.address = info(o, "Address");
      if (pci) {
        nif.pci = pci_device(t, pci);
        for (hwloc_obj_t s = pci->io_first_child; s; s = s->next_sibling)
          if (s->type == HWLOC_OBJ_OS_DEVICE &&
              s->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && s->name &&
              nif.rdma_device.empty())
            nif.rdma_device = s->name;
      }
      topo.netifs.push_back(std::move(nif));
    }
  }
  // A device local to a NUMA node belongs to that node's package.
  auto fill_package = [&](PciDevice& d) {
    if (d.package >= 0 || d.numa < 0) return;
    if (const NumaNode* n = topo.find_numa(d.numa)) d.package = n->package;
  };
  for (Gpu& g : topo.gpus) fill_package(g.pci);
  for (Nic& n : topo.nics) fill_package(n.pci);
  for (NetIf& n : topo.netifs) fill_package(n.pci);
  std::sort(topo.nics.begin(), topo.nics.end(),
            [](const Nic& a, const Nic& b) { return natural_less(a.name, b.name); });
  std::sort(topo.netifs.begin(), topo.netifs.end(),
            [](const NetIf& a, const NetIf& b) { return natural_less(a.name, b.name); });
  return topo;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw InvalidArgument("cannot open topology file '" + path + "': " + std::strerror(errno) +
                          " (check TPCOMM_TOPO_FILE or the path given)");
  std::string data;
  char buf[65536];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    data.append(buf, static_cast<size_t>(in.gcount()));
    if (data.size() > kMaxTopologyFile)
      throw InvalidArgument("topology file '" + path + "' is larger than " +
                            std::to_string(kMaxTopologyFile >> 20) + " MiB");
  }
  return data;
}

// hwloc's built-in XML reader (used when its libxml2 plugin is absent) rejects comments, which
// real exports carry (licence headers): drop them. hwloc XML has no CDATA where "<!--" could
// mean anything else.
std::string strip_xml_comments(std::string_view xml) {
  std::string out;
  out.reserve(xml.size());
  size_t pos = 0;
  while (pos < xml.size()) {
    size_t open = xml.find("<!--", pos);
    if (open == std::string_view::npos) break;
    size_t close = xml.find("-->", open + 4);
    if (close == std::string_view::npos) break;  // unterminated: leave it for hwloc to refuse
    out.append(xml.substr(pos, open - pos));
    pos = close + 3;
    // The built-in reader also trips over the blank line a removed comment leaves.
    while (pos < xml.size() &&
           (xml[pos] == ' ' || xml[pos] == '\t' || xml[pos] == '\n' || xml[pos] == '\r'))
      ++pos;
  }
  out.append(xml.substr(pos));
  return out;
}

// Loads an XML document into `h`, with a clear error naming `what`.
void load_xml_into(Hwloc& h, std::string_view xml, std::string_view what) {
  std::string buf = strip_xml_comments(xml);  // hwloc wants the terminating NUL counted
  if (hwloc_topology_set_xmlbuffer(h.get(), buf.c_str(), static_cast<int>(buf.size() + 1)) != 0 ||
      hwloc_topology_load(h.get()) != 0)
    throw InvalidArgument(std::string(what) +
                          " is not a topology hwloc can load (hwloc XML v1 or v2 expected, "
                          "e.g. from 'lstopo --of xml'; XML v3 from hwloc 3 is not supported): " +
                          std::strerror(errno));
}

bool looks_like_json(std::string_view s) {
  for (char c : s) {
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') continue;
    return c == '{';
  }
  return false;
}

std::string expand_name(std::string pattern) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      if (pattern[i + 1] == 'h') {
        out += host;
        ++i;
        continue;
      }
      if (pattern[i + 1] == 'p') {
        out += std::to_string(getpid());
        ++i;
        continue;
      }
    }
    out.push_back(pattern[i]);
  }
  return out;
}

}  // namespace

std::string local_host_id() {
  std::string id = config::get_string("TPCOMM_HOSTID");
  if (!id.empty()) return id;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string boot = read_small_file("/proc/sys/kernel/random/boot_id");
  return boot.empty() ? std::string(host) : std::string(host) + "/" + boot;
}

Topology discover() {
  Hwloc h;
  if (hwloc_topology_load(h.get()) != 0)
    throw TransportError(std::string("hwloc could not discover this machine: ") +
                         std::strerror(errno) + " (set TPCOMM_TOPO_FILE to use a stored one)");
  Topology t = build(h.get(), hwloc_topology_is_thissystem(h.get()) != 0);
  t.host_id = local_host_id();
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  t.hostname = host;
  t.source = "hwloc";
  if (t.hwloc_version.empty()) {
    // A live topology carries no release string; the API version is what the library offers.
    unsigned v = hwloc_get_api_version();
    t.hwloc_version = "API " + std::to_string(v >> 16) + "." + std::to_string((v >> 8) & 0xff) +
                      "." + std::to_string(v & 0xff);
  }
  TPLOG(INFO, TOPO) << "discovered " << t.hostname << ": " << t.packages.size() << " packages, "
                    << t.numa_nodes.size() << " NUMA nodes, " << t.gpus.size() << " GPUs, "
                    << t.nics.size() << " RDMA devices";
  return t;
}

Topology load_xml_buffer(std::string_view xml, std::string_view what) {
  Hwloc h;
  load_xml_into(h, xml, what);
  Topology t = build(h.get(), false);
  t.host_id = local_host_id();
  t.source = "xml:" + std::string(what);
  return t;
}

Topology load_file(const std::string& path) {
  std::string data = read_file(path);
  if (looks_like_json(data)) {
    Topology t = topology_from_json(data, "topology file '" + path + "'");
    t.host_id = local_host_id();
    t.source = "json:" + path;
    return t;
  }
  Topology t = load_xml_buffer(data, "topology file '" + path + "'");
  t.source = "xml:" + path;
  return t;
}

Topology load_configured() {
  std::string file = config::get_string("TPCOMM_TOPO_FILE");
  std::string dump = config::get_string("TPCOMM_TOPO_DUMP_FILE");
  Topology t = file.empty() ? discover() : load_file(file);
  if (!file.empty()) {
    TPLOG(INFO, TOPO) << "topology loaded from TPCOMM_TOPO_FILE=" << file << " (" << t.gpus.size()
                      << " GPUs, " << t.nics.size() << " RDMA devices); nothing is bound";
  }
  if (dump.empty()) return t;
  std::string out = expand_name(dump);
  if (out.size() > 4 && out.substr(out.size() - 4) == ".xml") {
    Hwloc h;
    if (file.empty()) {
      if (hwloc_topology_load(h.get()) != 0)
        throw TransportError("hwloc could not discover this machine for TPCOMM_TOPO_DUMP_FILE");
    } else {
      std::string data = read_file(file);
      if (looks_like_json(data))
        throw InvalidArgument("TPCOMM_TOPO_DUMP_FILE='" + out + "' asks for hwloc XML but " +
                              "TPCOMM_TOPO_FILE='" + file + "' is a JSON dump: name the dump " +
                              "*.json instead");
      load_xml_into(h, data, "topology file '" + file + "'");
    }
    if (hwloc_topology_export_xml(h.get(), out.c_str(), 0) != 0)
      throw InvalidArgument("cannot write TPCOMM_TOPO_DUMP_FILE='" + out +
                            "': " + std::strerror(errno));
  } else {
    write_json_file(t, out);
  }
  TPLOG(INFO, TOPO) << "topology written to " << out;
  return t;
}

}  // namespace tpcomm::topo
