#include "report.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "core/config.h"
#include "core/json.h"
#include "topology/topology.h"
#include "tpcomm/version.hpp"

namespace tpcomm::tpinfo {

namespace {

std::string pad(std::string s, size_t n) {
  if (s.size() < n) s.append(n - s.size(), ' ');
  return s;
}

std::string level_text(const topo::NicOptions& o) {
  return std::string("TPCOMM_NET_GDR_LEVEL=") + topo::relation_name(o.gdr_level);
}

}  // namespace

std::string version_line() {
  return std::string("tpcomm ") + tpcomm::version() + " (build: " + tpcomm::build_options() + ")";
}

namespace {
// What a CUDA tensor gets from this build, in words (docs/gpu.md).
constexpr const char* kCudaTensors =
    "checked (a pointer that is not device memory of the GPU its label names is refused), then "
    "staged through pinned host memory by every operation (reductions on the host; no CUDA IPC "
    "or GPUDirect yet)";
}  // namespace

std::string cuda_section(const cuda::DriverStatus& st) {
  std::ostringstream os;
  os << "CUDA\n";
  if (!cuda::built()) {
    os << "  build    not built: " << cuda::build_reason() << "\n";
    return os.str();
  }
  os << "  build    driver loaded at run time (no libcudart), GPU kernels for sm_80 sm_90 sm_100"
        " + PTX\n";
  if (!st.usable) {
    os << "  driver   " << st.reason << "\n";
    return os.str();
  }
  os << "  driver   " << st.library << ", CUDA " << st.version / 1000 << "."
     << (st.version % 1000) / 10 << ", " << st.devices << " device(s)"
     << (st.fake ? " [tpcomm's fake driver: a test double, not a GPU]" : "") << "\n";
  for (const std::string& line : st.device_lines) os << "  " << line << "\n";
  os << "  tensors  " << kCudaTensors << "\n";
  return os.str();
}

std::string transports_section(const std::vector<topo::TransportProbe>& probes) {
  std::ostringstream os;
  os << "Transports (this machine)\n";
  for (const topo::TransportProbe& p : probes) {
    os << "  " << pad(p.name, 8) << " " << pad(p.built ? "built" : "not built", 9) << "  "
       << pad(p.built ? (p.usable ? "usable" : "NOT usable") : "-", 10) << "  " << p.detail << "\n";
  }
  return os.str();
}

std::string gpu_nic_section(const topo::Topology& t, const topo::NicOptions& o) {
  if (t.gpus.empty() || t.nics.empty()) return "";
  std::ostringstream os;
  os << "GPU x NIC (PCIe relation; GDR = GPUDirect RDMA allowed under " << level_text(o) << ")\n";
  if (t.nics.size() <= 8) {
    os << "  " << pad("", 11);
    for (const topo::Nic& n : t.nics) os << pad(n.name, 12);
    os << "\n";
    for (const topo::Gpu& g : t.gpus) {
      os << "  " << pad(g.label(), 11);
      for (const topo::Nic& n : t.nics) {
        topo::Relation r = topo::pci_relation(g.pci, n.pci);
        bool gdr = topo::gdr_allowed(g, n, r, o.gdr_level, nullptr);
        os << pad(std::string(topo::relation_name(r)) + (gdr ? " GDR" : ""), 12);
      }
      os << "\n";
    }
  } else {
    for (const topo::Gpu& g : t.gpus) {
      std::map<topo::Relation, std::vector<std::string>> by;
      for (const topo::Nic& n : t.nics) by[topo::pci_relation(g.pci, n.pci)].push_back(n.name);
      os << "  " << g.label() << ":";
      for (const auto& [r, names] : by) {
        bool gdr = o.gdr_level != topo::Relation::LOC && r <= o.gdr_level;
        os << " " << topo::relation_name(r) << (gdr ? " GDR" : "") << " [";
        for (size_t i = 0; i < names.size(); ++i) os << (i ? " " : "") << names[i];
        os << "]";
      }
      os << "\n";
    }
  }
  os << "  PIX one PCIe switch, PXB several switches, PHB one host bridge, NODE same CPU package,"
        " SYS across sockets\n";
  std::string down;
  for (const topo::Nic& n : t.nics)
    if (!n.any_port_active()) down += (down.empty() ? "" : ", ") + n.name;
  if (!down.empty()) os << "  No active port (the NIC choice skips them): " << down << "\n";
  return os.str();
}

std::string nic_choice_section(const topo::Topology& t, const topo::NicOptions& o) {
  std::ostringstream os;
  os << "NIC choice (TPCOMM_IB_HCA='" << o.hca_text << "', " << level_text(o) << ")\n";
  if (t.nics.empty()) {
    os << "  no RDMA device: links between hosts use UCX or TCP\n";
    return os.str();
  }
  for (const topo::Gpu& g : t.gpus) {
    topo::NicPick p = topo::pick_nic_for_gpu(t, g, o);
    os << "  " << p.why << "\n";
    if (!p.nic.empty()) os << "      GPUDirect " << (p.gdr ? "yes: " : "no: ") << p.gdr_why << "\n";
  }
  for (const topo::NumaNode& n : t.numa_nodes)
    os << "  " << topo::pick_nic_for_numa(t, n.os_index, 0, o).why << "\n";
  return os.str();
}

std::string variables_section() {
  std::ostringstream os;
  os << "Variables (value, default, type: meaning)\n";
  std::vector<const config::Param*> external;
  for (const config::Param* p : config::all()) {
    if (p->external) {
      external.push_back(p);
      continue;
    }
    auto v = config::raw(p->name);
    os << "  " << pad(std::string(p->name), 26) << " " << pad(v ? "= " + *v : "(unset)", 14)
       << " default '" << p->default_value << "', " << config::type_name(p->type);
    if (!p->allowed.empty()) os << " " << p->allowed;
    os << "\n      " << p->description << "\n";
  }
  if (!external.empty()) {
    os << "  Also read (set ones marked *):";
    for (const config::Param* p : external)
      os << " " << p->name << (config::is_set(p->name) ? "*" : "");
    os << "\n";
  }
  return os.str();
}

std::string text_report(const Inputs& in) {
  std::ostringstream os;
  os << version_line() << "\n\n";
  os << cuda_section(in.cuda) << "\n";
  os << transports_section(in.transports) << "\n";
  os << "Topology" << (in.stored ? " (stored machine; nothing is bound)" : "") << "\n";
  os << topo::format_tree(in.topology) << "\n";
  std::string table = gpu_nic_section(in.topology, in.nic_options);
  if (!table.empty()) os << table << "\n";
  os << nic_choice_section(in.topology, in.nic_options) << "\n";
  os << variables_section();
  return os.str();
}

std::string json_report(const Inputs& in) {
  json::Json v;
  v["version"] = tpcomm::version();
  v["build_options"] = tpcomm::build_options();
  json::Json cu;
  cu["built"] = cuda::built();
  cu["build_reason"] = cuda::build_reason();
  cu["usable"] = in.cuda.usable;
  cu["library"] = in.cuda.library;
  cu["version"] = in.cuda.version;
  cu["fake"] = in.cuda.fake;
  cu["reason"] = in.cuda.reason;
  json::Json devs = json::Json::array();
  for (const std::string& line : in.cuda.device_lines) devs.push_back(line);
  cu["devices"] = std::move(devs);
  cu["tensors"] = kCudaTensors;
  v["cuda"] = std::move(cu);
  json::Json tr = json::Json::array();
  for (const topo::TransportProbe& p : in.transports) {
    json::Json o;
    o["name"] = p.name;
    o["built"] = p.built;
    o["usable"] = p.usable;
    o["detail"] = p.detail;
    tr.push_back(std::move(o));
  }
  v["transports"] = std::move(tr);
  v["topology"] = json::parse(topo::to_json(in.topology));
  json::Json pairs = json::Json::array();
  for (const topo::Gpu& g : in.topology.gpus) {
    for (const topo::Nic& n : in.topology.nics) {
      topo::Relation r = topo::pci_relation(g.pci, n.pci);
      std::string why;
      bool gdr = topo::gdr_allowed(g, n, r, in.nic_options.gdr_level, &why);
      json::Json o;
      o["gpu"] = g.label();
      o["nic"] = n.name;
      o["relation"] = topo::relation_name(r);
      o["gdr"] = gdr;
      o["why"] = why;
      pairs.push_back(std::move(o));
    }
  }
  v["gpu_nic"] = std::move(pairs);
  json::Json picks = json::Json::array();
  auto pick_json = [](const std::string& buffer, const topo::NicPick& p) {
    json::Json o;
    o["buffer"] = buffer;
    o["nic"] = p.nic;
    o["port"] = p.port;
    o["relation"] = topo::relation_name(p.relation);
    o["gdr"] = p.gdr;
    o["why"] = p.why;
    o["gdr_why"] = p.gdr_why;
    return o;
  };
  for (const topo::Gpu& g : in.topology.gpus)
    picks.push_back(pick_json(g.label(), topo::pick_nic_for_gpu(in.topology, g, in.nic_options)));
  for (const topo::NumaNode& n : in.topology.numa_nodes)
    picks.push_back(pick_json("numa" + std::to_string(n.os_index),
                              topo::pick_nic_for_numa(in.topology, n.os_index, 0, in.nic_options)));
  v["nic_choice"] = std::move(picks);
  json::Json vars = json::Json::array();
  for (const config::Param* p : config::all()) {
    json::Json o;
    auto val = config::raw(p->name);
    o["name"] = std::string(p->name);
    o["value"] = val ? json::Json(*val) : json::Json(nullptr);
    o["default"] = std::string(p->default_value);
    o["type"] = config::type_name(p->type);
    o["allowed"] = std::string(p->allowed);
    o["subsystem"] = std::string(p->subsystem);
    o["external"] = p->external;
    o["description"] = std::string(p->description);
    vars.push_back(std::move(o));
  }
  v["variables"] = std::move(vars);
  return json::dump(v, 2) + "\n";
}

}  // namespace tpcomm::tpinfo
