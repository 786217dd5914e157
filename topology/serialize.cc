// Topology <-> JSON. The encoding writes every field, in a fixed order, so that
// to_json(topology_from_json(s)) == s and topology_from_json(to_json(t)) == t.
#include "topology/serialize.h"

#include <fstream>
#include <limits>

#include "tpcomm/error.hpp"

namespace tpcomm::topo {

namespace detail {

namespace {

const json::Json& object_at(const json::Json& v, const std::string& where) {
  json::as_object(v, where);
  return v;
}

std::string field(const std::string& where, std::string_view key) {
  return where + "." + std::string(key);
}

}  // namespace

void get(const json::Json& o, const std::string& where, std::string_view key, std::string* out) {
  if (const json::Json* v = json::find(o, key)) *out = json::as_string(*v, field(where, key));
}

void get(const json::Json& o, const std::string& where, std::string_view key, int* out) {
  const json::Json* v = json::find(o, key);
  if (!v) return;
  int64_t i = json::as_int(*v, field(where, key));
  if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max())
    throw InvalidArgument(field(where, key) + " is out of range: " + std::to_string(i));
  *out = static_cast<int>(i);
}

void get(const json::Json& o, const std::string& where, std::string_view key, bool* out) {
  if (const json::Json* v = json::find(o, key)) *out = json::as_bool(*v, field(where, key));
}

void get(const json::Json& o, const std::string& where, std::string_view key, double* out) {
  if (const json::Json* v = json::find(o, key)) *out = json::as_double(*v, field(where, key));
}

void get(const json::Json& o, const std::string& where, std::string_view key, uint16_t* out) {
  const json::Json* v = json::find(o, key);
  if (!v) return;
  int64_t i = json::as_int(*v, field(where, key));
  if (i < 0 || i > 0xffff)
    throw InvalidArgument(field(where, key) + " is out of range 0..65535: " + std::to_string(i));
  *out = static_cast<uint16_t>(i);
}

void get(const json::Json& o, const std::string& where, std::string_view key, uint64_t* out) {
  const json::Json* v = json::find(o, key);
  if (!v) return;
  *out = json::as_uint(*v, field(where, key));
}

void get(const json::Json& o, const std::string& where, std::string_view key,
         std::vector<std::string>* out) {
  out->clear();
  each(o, where, key,
       [&](const json::Json& e, const std::string& w) { out->push_back(json::as_string(e, w)); });
}

json::Json encode_strings(const std::vector<std::string>& v) {
  json::Json a = json::Json::array();
  for (const std::string& s : v) a.emplace_back(s);
  return a;
}

json::Json encode(const PciDevice& d) {
  json::Json v;
  v["busid"] = d.busid;
  v["vendor_id"] = static_cast<int>(d.vendor_id);
  v["device_id"] = static_cast<int>(d.device_id);
  v["class_id"] = static_cast<int>(d.class_id);
  v["link_gbs"] = d.link_gbs;
  v["path"] = encode_strings(d.path);
  v["numa"] = d.numa;
  v["package"] = d.package;
  return v;
}

PciDevice decode_pci(const json::Json& v, const std::string& where) {
  object_at(v, where);
  PciDevice d;
  get(v, where, "busid", &d.busid);
  get(v, where, "vendor_id", &d.vendor_id);
  get(v, where, "device_id", &d.device_id);
  get(v, where, "class_id", &d.class_id);
  get(v, where, "link_gbs", &d.link_gbs);
  get(v, where, "path", &d.path);
  get(v, where, "numa", &d.numa);
  get(v, where, "package", &d.package);
  return d;
}

json::Json encode(const Gpu& g) {
  json::Json v;
  v["pci"] = encode(g.pci);
  v["vendor"] = g.vendor;
  v["model"] = g.model;
  v["cuda_index"] = g.cuda_index;
  v["nvml_index"] = g.nvml_index;
  v["os_devices"] = encode_strings(g.os_devices);
  v["nvlink_peers"] = encode_strings(g.nvlink_peers);
  v["nvswitch"] = g.nvswitch;
  v["nvlink_bw"] = g.nvlink_bw;
  return v;
}

Gpu decode_gpu(const json::Json& v, const std::string& where) {
  object_at(v, where);
  Gpu g;
  if (const json::Json* p = json::find(v, "pci")) g.pci = decode_pci(*p, where + ".pci");
  get(v, where, "vendor", &g.vendor);
  get(v, where, "model", &g.model);
  get(v, where, "cuda_index", &g.cuda_index);
  get(v, where, "nvml_index", &g.nvml_index);
  get(v, where, "os_devices", &g.os_devices);
  get(v, where, "nvlink_peers", &g.nvlink_peers);
  get(v, where, "nvswitch", &g.nvswitch);
  get(v, where, "nvlink_bw", &g.nvlink_bw);
  return g;
}

json::Json encode(const NicPort& p) {
  json::Json v;
  v["number"] = p.number;
  v["state"] = p.state;
  v["link_layer"] = p.link_layer;
  v["lid"] = p.lid;
  v["gid0"] = p.gid0;
  v["rate_gbps"] = p.rate_gbps;
  return v;
}

json::Json encode(const Nic& n) {
  json::Json v;
  v["name"] = n.name;
  v["pci"] = encode(n.pci);
  v["kind"] = n.kind;
  json::Json ports = json::Json::array();
  for (const NicPort& p : n.ports) ports.push_back(encode(p));
  v["ports"] = std::move(ports);
  v["netdevs"] = encode_strings(n.netdevs);
  return v;
}

Nic decode_nic(const json::Json& v, const std::string& where) {
  object_at(v, where);
  Nic n;
  get(v, where, "name", &n.name);
  if (const json::Json* p = json::find(v, "pci")) n.pci = decode_pci(*p, where + ".pci");
  get(v, where, "kind", &n.kind);
  each(v, where, "ports", [&](const json::Json& e, const std::string& w) {
    object_at(e, w);
    NicPort p;
    get(e, w, "number", &p.number);
    get(e, w, "state", &p.state);
    get(e, w, "link_layer", &p.link_layer);
    get(e, w, "lid", &p.lid);
    get(e, w, "gid0", &p.gid0);
    get(e, w, "rate_gbps", &p.rate_gbps);
    n.ports.push_back(std::move(p));
  });
  get(v, where, "netdevs", &n.netdevs);
  return n;
}

json::Json encode(const NetIf& n) {
  json::Json v;
  v["name"] = n.name;
  v["address"] = n.address;
  v["pci"] = encode(n.pci);
  v["rdma_device"] = n.rdma_device;
  return v;
}

NetIf decode_netif(const json::Json& v, const std::string& where) {
  object_at(v, where);
  NetIf n;
  get(v, where, "name", &n.name);
  get(v, where, "address", &n.address);
  if (const json::Json* p = json::find(v, "pci")) n.pci = decode_pci(*p, where + ".pci");
  get(v, where, "rdma_device", &n.rdma_device);
  return n;
}

}  // namespace detail

namespace {
constexpr const char* kFormat = "tpcomm-topology";
constexpr int kVersion = 1;
}  // namespace

std::string to_json(const Topology& t, int indent) {
  using detail::encode;
  json::Json v;
  v["format"] = kFormat;
  v["version"] = kVersion;
  v["host_id"] = t.host_id;
  v["hostname"] = t.hostname;
  v["source"] = t.source;
  v["hwloc_version"] = t.hwloc_version;
  v["cpu_model"] = t.cpu_model;
  v["cores"] = t.cores;
  v["pus"] = t.pus;
  json::Json pk = json::Json::array(), nn = pk, gp = pk, ni = pk, ne = pk;
  for (const Package& p : t.packages) {
    json::Json o;
    o["os_index"] = p.os_index;
    o["cpuset"] = p.cpuset;
    pk.push_back(std::move(o));
  }
  for (const NumaNode& n : t.numa_nodes) {
    json::Json o;
    o["os_index"] = n.os_index;
    o["package"] = n.package;
    o["cpuset"] = n.cpuset;
    o["memory_bytes"] = n.memory_bytes;
    nn.push_back(std::move(o));
  }
  for (const Gpu& g : t.gpus) gp.push_back(encode(g));
  for (const Nic& n : t.nics) ni.push_back(encode(n));
  for (const NetIf& n : t.netifs) ne.push_back(encode(n));
  v["packages"] = std::move(pk);
  v["numa_nodes"] = std::move(nn);
  v["gpus"] = std::move(gp);
  v["nics"] = std::move(ni);
  v["netifs"] = std::move(ne);
  return json::dump(v, indent > 0 ? indent : -1);
}

Topology topology_from_json(std::string_view text, std::string_view what) {
  using namespace detail;
  json::Json v = json::parse(text, what);
  const std::string w(what);
  json::as_object(v, w);
  std::string format;
  int version = 0;
  get(v, w, "format", &format);
  get(v, w, "version", &version);
  if (format != kFormat || version != kVersion)
    throw InvalidArgument(w + " is not a tpcomm topology (format '" + format + "' version " +
                          std::to_string(version) + "; expected '" + kFormat + "' version " +
                          std::to_string(kVersion) + ")");
  Topology t;
  get(v, w, "host_id", &t.host_id);
  get(v, w, "hostname", &t.hostname);
  get(v, w, "source", &t.source);
  get(v, w, "hwloc_version", &t.hwloc_version);
  get(v, w, "cpu_model", &t.cpu_model);
  get(v, w, "cores", &t.cores);
  get(v, w, "pus", &t.pus);
  each(v, w, "packages", [&](const json::Json& e, const std::string& ew) {
    json::as_object(e, ew);
    Package p;
    get(e, ew, "os_index", &p.os_index);
    get(e, ew, "cpuset", &p.cpuset);
    t.packages.push_back(std::move(p));
  });
  each(v, w, "numa_nodes", [&](const json::Json& e, const std::string& ew) {
    json::as_object(e, ew);
    NumaNode n;
    get(e, ew, "os_index", &n.os_index);
    get(e, ew, "package", &n.package);
    get(e, ew, "cpuset", &n.cpuset);
    get(e, ew, "memory_bytes", &n.memory_bytes);
    t.numa_nodes.push_back(std::move(n));
  });
  each(v, w, "gpus",
       [&](const json::Json& e, const std::string& ew) { t.gpus.push_back(decode_gpu(e, ew)); });
  each(v, w, "nics",
       [&](const json::Json& e, const std::string& ew) { t.nics.push_back(decode_nic(e, ew)); });
  each(v, w, "netifs", [&](const json::Json& e, const std::string& ew) {
    t.netifs.push_back(decode_netif(e, ew));
  });
  return t;
}

void write_json_file(const Topology& t, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << to_json(t, 2) << "\n";
  out.close();
  if (!out) throw InvalidArgument("cannot write topology to '" + path + "'");
}

}  // namespace tpcomm::topo
