// The per-rank summary published through the store, and its compact encoding.
#include "core/log.h"
#include "topology/select.h"
#include "topology/serialize.h"
#include "tpcomm/error.hpp"

namespace tpcomm::topo {

namespace {

constexpr const char* kFormat = "tpcomm-summary";
constexpr int kVersion = 1;

// The parts of a GPU or NIC a peer needs: identity, PCI path, NVLink, kind and ports.
Gpu slim(const Gpu& g) {
  Gpu s;
  s.pci = g.pci;
  s.pci.link_gbs = 0;
  s.vendor = g.vendor;
  s.cuda_index = g.cuda_index;
  s.nvml_index = g.nvml_index;
  s.nvlink_peers = g.nvlink_peers;
  s.nvswitch = g.nvswitch;
  return s;
}

Nic slim(const Nic& n) {
  Nic s;
  s.name = n.name;
  s.pci = n.pci;
  s.pci.link_gbs = 0;
  s.kind = n.kind;
  for (const NicPort& p : n.ports) {
    NicPort q;
    q.number = p.number;
    q.state = p.state;
    q.link_layer = p.link_layer;
    s.ports.push_back(q);
  }
  return s;
}

json::Json encode_pick(const NicPick& p) {
  json::Json v;
  v["nic"] = p.nic;
  v["port"] = p.port;
  v["kind"] = p.kind;
  v["relation"] = relation_name(p.relation);
  v["gdr"] = p.gdr;
  v["why"] = p.why;
  v["gdr_why"] = p.gdr_why;
  return v;
}

NicPick decode_pick(const json::Json& v, const std::string& where) {
  using detail::get;
  json::as_object(v, where);
  NicPick p;
  std::string rel = "SYS";
  get(v, where, "nic", &p.nic);
  get(v, where, "port", &p.port);
  get(v, where, "kind", &p.kind);
  get(v, where, "relation", &rel);
  auto r = parse_relation(rel);
  if (!r) throw InvalidArgument(where + ".relation is not a relation: '" + rel + "'");
  p.relation = *r;
  get(v, where, "gdr", &p.gdr);
  get(v, where, "why", &p.why);
  get(v, where, "gdr_why", &p.gdr_why);
  return p;
}

}  // namespace

const Gpu* Summary::my_gpu() const {
  if (gpu.empty()) return nullptr;
  for (const Gpu& g : gpus)
    if (g.pci.busid == gpu) return &g;
  return nullptr;
}

Placement current_placement(const Topology& t, int rank, int local_rank, std::string gpu) {
  Placement p;
  p.rank = rank;
  p.local_rank = local_rank;
  p.numa = numa_of_cpus(t, current_cpus());
  p.gpu = std::move(gpu);
  return p;
}

Summary make_summary(const Topology& t, const Placement& p, const NicOptions& opts,
                     std::vector<std::string> transports) {
  Summary s;
  s.rank = p.rank;
  s.local_rank = p.local_rank;
  s.host_id = t.host_id;
  s.numa_count = static_cast<int>(t.numa_nodes.size());
  s.numa = p.numa;
  for (const Gpu& g : t.gpus) s.gpus.push_back(slim(g));
  for (const Nic& n : t.nics) s.nics.push_back(slim(n));
  s.host_nic = pick_nic_for_numa(t, p.numa, p.local_rank, opts);
  if (!p.gpu.empty()) {
    const Gpu* g = t.find_gpu(p.gpu);
    if (!g) {
      std::string have;
      for (const Gpu& x : t.gpus) have += (have.empty() ? "" : ", ") + x.label();
      throw InvalidArgument("rank " + std::to_string(p.rank) + " uses GPU '" + p.gpu +
                            "', which this host's topology does not have (GPUs: " +
                            (have.empty() ? "none" : have) + ")");
    }
    s.gpu = g->pci.busid;
    s.gpu_nic = pick_nic_for_gpu(t, *g, opts);
  }
  s.transports = std::move(transports);
  TPLOG(INFO, TOPO) << "rank " << s.rank << " host memory: "
                    << (s.host_nic.nic.empty() ? "no RDMA device" : s.host_nic.why);
  if (!s.gpu.empty()) {
    TPLOG(INFO, TOPO) << "rank " << s.rank << " GPU memory: " << s.gpu_nic.why << "; GPUDirect "
                      << (s.gpu_nic.gdr ? "yes: " : "no: ") << s.gpu_nic.gdr_why;
  }
  return s;
}

Summary local_summary(const Topology& t, int rank, int local_rank, std::string gpu,
                      std::vector<std::string> transports) {
  return make_summary(t, current_placement(t, rank, local_rank, std::move(gpu)),
                      NicOptions::from_config(), std::move(transports));
}

std::string summary_to_string(const Summary& s) {
  using detail::encode;
  json::Json v;
  v["format"] = kFormat;
  v["version"] = kVersion;
  v["rank"] = s.rank;
  v["local_rank"] = s.local_rank;
  v["host_id"] = s.host_id;
  v["numa_count"] = s.numa_count;
  v["numa"] = s.numa;
  v["gpu"] = s.gpu;
  json::Json gpus = json::Json::array(), nics = gpus;
  for (const Gpu& g : s.gpus) gpus.push_back(encode(g));
  for (const Nic& n : s.nics) nics.push_back(encode(n));
  v["gpus"] = std::move(gpus);
  v["nics"] = std::move(nics);
  v["host_nic"] = encode_pick(s.host_nic);
  v["gpu_nic"] = encode_pick(s.gpu_nic);
  v["transports"] = detail::encode_strings(s.transports);
  return json::dump(v);
}

Summary summary_from_string(std::string_view text, std::string_view what) {
  using namespace detail;
  json::Json v = json::parse(text, what);
  const std::string w(what);
  json::as_object(v, w);
  std::string format;
  int version = 0;
  get(v, w, "format", &format);
  get(v, w, "version", &version);
  if (format != kFormat || version != kVersion)
    throw InvalidArgument(w + " is not a tpcomm topology summary (format '" + format +
                          "' version " + std::to_string(version) + "; expected '" + kFormat +
                          "' version " + std::to_string(kVersion) +
                          "): are all ranks running the same tpcomm?");
  Summary s;
  get(v, w, "rank", &s.rank);
  get(v, w, "local_rank", &s.local_rank);
  get(v, w, "host_id", &s.host_id);
  get(v, w, "numa_count", &s.numa_count);
  get(v, w, "numa", &s.numa);
  get(v, w, "gpu", &s.gpu);
  each(v, w, "gpus",
       [&](const json::Json& e, const std::string& ew) { s.gpus.push_back(decode_gpu(e, ew)); });
  each(v, w, "nics",
       [&](const json::Json& e, const std::string& ew) { s.nics.push_back(decode_nic(e, ew)); });
  if (const json::Json* p = json::find(v, "host_nic"))
    s.host_nic = decode_pick(*p, w + ".host_nic");
  if (const json::Json* p = json::find(v, "gpu_nic")) s.gpu_nic = decode_pick(*p, w + ".gpu_nic");
  get(v, w, "transports", &s.transports);
  if (!s.gpu.empty() && !s.my_gpu())
    throw InvalidArgument(w + ": gpu '" + s.gpu + "' is not among its gpus");
  return s;
}

}  // namespace tpcomm::topo
