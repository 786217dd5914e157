// Topology <-> JSON. The encoding writes every field, in a fixed order, so that
// to_json(topology_from_json(s)) == s and topology_from_json(to_json(t)) == t.
#include "topology/serialize.h"

#include <fstream>
#include <limits>

#include "tpcomm/error.hpp"

namespace tpcomm::topo {

namespace detail {

namespace {

const json::Value& object_at(const json::Value& v, const std::string& where) {
  v.as_object(where);
  return v;
}

std::string field(const std::string& where, std::string_view key) {
  return where + "." + std::string(key);
}

}  // namespace

void get(const json::Value& o, const std::string& where, std::string_view key, std::string* out) {
  if (const json::Value* v = o.find(key)) *out = v->as_string(field(where, key));
}

void get(const json::Value& o, const std::string& where, std::string_view key, int* out) {
  const json::Value* v = o.find(key);
  if (!v) return;
  int64_t i = v->as_int(field(where, key));
  if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max())
    throw InvalidArgument(field(where, key) + " is out of range: " + std::to_string(i));
  *out = static_cast<int>(i);
}

void get(const json::Value& o, const std::string& where, std::string_view key, bool* out) {
  if (const json::Value* v = o.find(key)) *out = v->as_bool(field(where, key));
}

void get(const json::Value& o, const std::string& where, std::string_view key, double* out) {
  if (const json::Value* v = o.find(key)) *out = v->as_double(field(where, key));
}

void get(const json::Value& o, const std::string& where, std::string_view key, uint16_t* out) {
  const json::Value* v = o.find(key);
  if (!v) return;
  int64_t i = v->as_int(field(where, key));
  if (i < 0 || i > 0xffff)
    throw InvalidArgument(field(where, key) + " is out of range 0..65535: " + std::to_string(i));
  *out = static_cast<uint16_t>(i);
}

void get(const json::Value& o, const std::string& where, std::string_view key, uint64_t* out) {
  const json::Value* v = o.find(key);
  if (!v) return;
  int64_t i = v->as_int(field(where, key));
  if (i < 0) throw InvalidArgument(field(where, key) + " is negative: " + std::to_string(i));
  *out = static_cast<uint64_t>(i);
}

void get(const json::Value& o, const std::string& where, std::string_view key,
         std::vector<std::string>* out) {
  out->clear();
  each(o, where, key,
       [&](const json::Value& e, const std::string& w) { out->push_back(e.as_string(w)); });
}

json::Value encode_strings(const std::vector<std::string>& v) {
  json::Array a;
  for (const std::string& s : v) a.emplace_back(s);
  return json::Value(std::move(a));
}

json::Value encode(const PciDevice& d) {
  json::Value v;
  v.set("busid", d.busid);
  v.set("vendor_id", static_cast<int>(d.vendor_id));
  v.set("device_id", static_cast<int>(d.device_id));
  v.set("class_id", static_cast<int>(d.class_id));
  v.set("link_gbs", d.link_gbs);
  v.set("path", encode_strings(d.path));
  v.set("numa", d.numa);
  v.set("package", d.package);
  return v;
}

PciDevice decode_pci(const json::Value& v, const std::string& where) {
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

json::Value encode(const Gpu& g) {
  json::Value v;
  v.set("pci", encode(g.pci));
  v.set("vendor", g.vendor);
  v.set("model", g.model);
  v.set("cuda_index", g.cuda_index);
  v.set("nvml_index", g.nvml_index);
  v.set("os_devices", encode_strings(g.os_devices));
  v.set("nvlink_peers", encode_strings(g.nvlink_peers));
  v.set("nvswitch", g.nvswitch);
  v.set("nvlink_bw", g.nvlink_bw);
  return v;
}

Gpu decode_gpu(const json::Value& v, const std::string& where) {
  object_at(v, where);
  Gpu g;
  if (const json::Value* p = v.find("pci")) g.pci = decode_pci(*p, where + ".pci");
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

json::Value encode(const NicPort& p) {
  json::Value v;
  v.set("number", p.number);
  v.set("state", p.state);
  v.set("link_layer", p.link_layer);
  v.set("lid", p.lid);
  v.set("gid0", p.gid0);
  v.set("rate_gbps", p.rate_gbps);
  return v;
}

json::Value encode(const Nic& n) {
  json::Value v;
  v.set("name", n.name);
  v.set("pci", encode(n.pci));
  v.set("kind", n.kind);
  json::Array ports;
  for (const NicPort& p : n.ports) ports.push_back(encode(p));
  v.set("ports", json::Value(std::move(ports)));
  v.set("netdevs", encode_strings(n.netdevs));
  return v;
}

Nic decode_nic(const json::Value& v, const std::string& where) {
  object_at(v, where);
  Nic n;
  get(v, where, "name", &n.name);
  if (const json::Value* p = v.find("pci")) n.pci = decode_pci(*p, where + ".pci");
  get(v, where, "kind", &n.kind);
  each(v, where, "ports", [&](const json::Value& e, const std::string& w) {
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

json::Value encode(const NetIf& n) {
  json::Value v;
  v.set("name", n.name);
  v.set("address", n.address);
  v.set("pci", encode(n.pci));
  v.set("rdma_device", n.rdma_device);
  return v;
}

NetIf decode_netif(const json::Value& v, const std::string& where) {
  object_at(v, where);
  NetIf n;
  get(v, where, "name", &n.name);
  get(v, where, "address", &n.address);
  if (const json::Value* p = v.find("pci")) n.pci = decode_pci(*p, where + ".pci");
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
  json::Value v;
  v.set("format", kFormat);
  v.set("version", kVersion);
  v.set("host_id", t.host_id);
  v.set("hostname", t.hostname);
  v.set("source", t.source);
  v.set("hwloc_version", t.hwloc_version);
  v.set("cpu_model", t.cpu_model);
  v.set("cores", t.cores);
  v.set("pus", t.pus);
  json::Array pk, nn, gp, ni, ne;
  for (const Package& p : t.packages) {
    json::Value o;
    o.set("os_index", p.os_index);
    o.set("cpuset", p.cpuset);
    pk.push_back(std::move(o));
  }
  for (const NumaNode& n : t.numa_nodes) {
    json::Value o;
    o.set("os_index", n.os_index);
    o.set("package", n.package);
    o.set("cpuset", n.cpuset);
    o.set("memory_bytes", n.memory_bytes);
    nn.push_back(std::move(o));
  }
  for (const Gpu& g : t.gpus) gp.push_back(encode(g));
  for (const Nic& n : t.nics) ni.push_back(encode(n));
  for (const NetIf& n : t.netifs) ne.push_back(encode(n));
  v.set("packages", json::Value(std::move(pk)));
  v.set("numa_nodes", json::Value(std::move(nn)));
  v.set("gpus", json::Value(std::move(gp)));
  v.set("nics", json::Value(std::move(ni)));
  v.set("netifs", json::Value(std::move(ne)));
  return json::write(v, indent);
}

Topology topology_from_json(std::string_view text, std::string_view what) {
  using namespace detail;
  json::Value v = json::parse(text, what);
  const std::string w(what);
  v.as_object(w);
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
  each(v, w, "packages", [&](const json::Value& e, const std::string& ew) {
    e.as_object(ew);
    Package p;
    get(e, ew, "os_index", &p.os_index);
    get(e, ew, "cpuset", &p.cpuset);
    t.packages.push_back(std::move(p));
  });
  each(v, w, "numa_nodes", [&](const json::Value& e, const std::string& ew) {
    e.as_object(ew);
    NumaNode n;
    get(e, ew, "os_index", &n.os_index);
    get(e, ew, "package", &n.package);
    get(e, ew, "cpuset", &n.cpuset);
    get(e, ew, "memory_bytes", &n.memory_bytes);
    t.numa_nodes.push_back(std::move(n));
  });
  each(v, w, "gpus",
       [&](const json::Value& e, const std::string& ew) { t.gpus.push_back(decode_gpu(e, ew)); });
  each(v, w, "nics",
       [&](const json::Value& e, const std::string& ew) { t.nics.push_back(decode_nic(e, ew)); });
  each(v, w, "netifs", [&](const json::Value& e, const std::string& ew) {
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
