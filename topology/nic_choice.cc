// NIC choice per buffer location, TPCOMM_IB_HCA and TPCOMM_NET_GDR_LEVEL.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <functional>

#include "core/config.h"
#include "topology/select.h"
#include "tpcomm/error.hpp"

namespace tpcomm::topo {

namespace {

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

[[noreturn]] void bad_hca(std::string_view spec, const std::string& why) {
  throw ConfigError("TPCOMM_IB_HCA='" + std::string(spec) + "' is malformed: " + why +
                    ". Expected NCCL_IB_HCA syntax, e.g. 'mlx5_0,mlx5_1', '^mlx5_3', "
                    "'=mlx5_1', 'mlx5_0:1'.");
}

bool name_matches(const HcaFilter& f, const HcaFilter::Entry& e, std::string_view nic) {
  return f.exact ? nic == e.name : nic.substr(0, e.name.size()) == e.name;
}

}  // namespace

HcaFilter parse_ib_hca(std::string_view spec) {
  HcaFilter f;
  std::string s = trim(spec);
  std::string_view rest = s;
  if (!rest.empty() && rest.front() == '^') f.exclude = true, rest.remove_prefix(1);
  if (!rest.empty() && rest.front() == '=') f.exact = true, rest.remove_prefix(1);
  if (rest.empty()) {
    if (f.exclude || f.exact) bad_hca(spec, "no device named after '^' or '='");
    return f;
  }
  size_t start = 0;
  while (start <= rest.size()) {
    size_t end = rest.find(',', start);
    if (end == std::string_view::npos) end = rest.size();
    std::string item = trim(rest.substr(start, end - start));
    if (item.empty()) bad_hca(spec, "empty entry");
    HcaFilter::Entry e;
    size_t colon = item.find(':');
    e.name = item.substr(0, colon);
    if (e.name.empty()) bad_hca(spec, "entry '" + item + "' has no device name");
    if (e.name.find_first_of("^= ") != std::string::npos)
      bad_hca(spec, "'^' and '=' apply to the whole list and go first (entry '" + item + "')");
    if (colon != std::string::npos) {
      std::string_view port = std::string_view(item).substr(colon + 1);
      int p = 0;
      auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
      if (ec != std::errc() || ptr != port.data() + port.size() || p < 1 || p > 255)
        bad_hca(spec, "port in '" + item + "' must be a number from 1 to 255");
      e.port = p;
    }
    f.entries.push_back(std::move(e));
    start = end + 1;
  }
  return f;
}

bool HcaFilter::allows(std::string_view nic, int port) const {
  if (entries.empty()) return true;
  if (exclude) {
    for (const Entry& e : entries)
      if (name_matches(*this, e, nic) && (e.port == -1 || (port != -1 && e.port == port)))
        return false;
    return true;
  }
  for (const Entry& e : entries)
    if (name_matches(*this, e, nic) && (e.port == -1 || port == -1 || e.port == port)) return true;
  return false;
}

Relation parse_gdr_level(std::string_view s) {
  std::string v = trim(s);
  if (auto r = parse_relation(v)) return *r;
  int i = -1;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), i);
  if (!v.empty() && ec == std::errc() && ptr == v.data() + v.size() && i >= 0) {
    static constexpr Relation kLegacy[] = {Relation::LOC, Relation::PIX, Relation::PXB,
                                           Relation::PHB};
    return i < 4 ? kLegacy[i] : Relation::SYS;
  }
  throw ConfigError("TPCOMM_NET_GDR_LEVEL='" + std::string(s) +
                    "' is malformed: use LOC, PIX, PXB, PHB, NODE or SYS (or NCCL's 0..4)");
}

NicOptions NicOptions::from_config() {
  NicOptions o;
  o.hca_text = config::get_string("TPCOMM_IB_HCA");
  o.hca = parse_ib_hca(o.hca_text);
  o.gdr_level = parse_gdr_level(config::get_enum("TPCOMM_NET_GDR_LEVEL"));
  return o;
}

bool gdr_allowed(const Gpu& gpu, const Nic& nic, Relation rel, Relation level, std::string* why) {
  std::string pair = gpu.label() + " and " + nic.name;
  std::string lvl = std::string("TPCOMM_NET_GDR_LEVEL=") + relation_name(level);
  if (level == Relation::LOC) {
    if (why) *why = lvl + " disables GPUDirect RDMA: staged through host memory";
    return false;
  }
  bool ok = rel <= level;
  if (why)
    *why = pair + " " + relation_phrase(rel) + " (" + relation_name(rel) +
           (ok ? ", within " + lvl + ")" : ", beyond " + lvl + "): staged through host memory");
  return ok;
}

namespace {

// The first port of `nic` that is active and allowed; -1 when none. Devices whose ports hwloc
// did not list count as port 1.
int usable_port(const Nic& nic, const HcaFilter& hca) {
  if (nic.ports.empty()) return hca.allows(nic.name, 1) ? 1 : -1;
  for (const NicPort& p : nic.ports)
    if (p.active() && hca.allows(nic.name, p.number)) return p.number;
  return -1;
}

// Indices of the usable NICs nearest by `rel`, verbs-capable devices first; sets *best.
std::vector<size_t> nearest(const Topology& t, const NicOptions& o,
                            const std::function<Relation(const Nic&)>& rel, Relation* best,
                            std::string* none_why) {
  std::vector<size_t> usable, verbs;
  for (size_t i = 0; i < t.nics.size(); ++i) {
    if (usable_port(t.nics[i], o.hca) < 0) continue;
    usable.push_back(i);
    if (t.nics[i].verbs_capable()) verbs.push_back(i);
  }
  const std::vector<size_t>& pool = verbs.empty() ? usable : verbs;
  if (pool.empty()) {
    bool any_active =
        std::any_of(t.nics.begin(), t.nics.end(), [](const Nic& n) { return n.any_port_active(); });
    if (t.nics.empty())
      *none_why = "no RDMA device on this host";
    else if (!any_active)
      *none_why = "no RDMA device has an active port";
    else
      *none_why = "no RDMA device passes TPCOMM_IB_HCA='" + o.hca_text + "'";
    return {};
  }
  *best = Relation::SYS;
  for (size_t i : pool) *best = std::min(*best, rel(t.nics[i]));
  std::vector<size_t> eq;
  for (size_t i : pool)
    if (rel(t.nics[i]) == *best) eq.push_back(i);
  return eq;  // in NIC name order, as t.nics is
}

// Devices nearer than `best` that could not be used, with the reason: a hint for the log.
std::string nearer_unusable(const Topology& t, const NicOptions& o,
                            const std::function<Relation(const Nic&)>& rel, Relation best) {
  std::string out;
  for (const Nic& n : t.nics) {
    Relation r = rel(n);
    if (r >= best) continue;
    std::string why;
    if (!o.hca.allows(n.name, -1))
      why = "excluded by TPCOMM_IB_HCA";
    else if (!n.any_port_active())
      why = "no active port";
    else if (usable_port(n, o.hca) < 0)
      why = "its active ports are excluded by TPCOMM_IB_HCA";
    else if (!n.verbs_capable())
      why = n.kind + ", not verbs-capable";
    else
      continue;
    out += (out.empty() ? "" : ", ") + n.name + " (" + relation_name(r) + ", " + why + ")";
  }
  return out.empty() ? "" : "; nearer but not used: " + out;
}

std::string names(const Topology& t, const std::vector<size_t>& idx) {
  std::string s;
  for (size_t k = 0; k < idx.size() && k < 6; ++k) s += (k ? ", " : "") + t.nics[idx[k]].name;
  if (idx.size() > 6) s += ", ...";
  return s;
}

NicPick make_pick(const Topology& t, const std::vector<size_t>& eq, size_t slot, Relation rel,
                  const NicOptions& o) {
  const Nic& n = t.nics[eq[slot % eq.size()]];
  NicPick p;
  p.nic = n.name;
  p.port = usable_port(n, o.hca);
  p.kind = n.kind;
  p.relation = rel;
  return p;
}

}  // namespace

NicPick pick_nic_for_gpu(const Topology& t, const Gpu& gpu, const NicOptions& o) {
  auto rel = [&](const Nic& n) { return pci_relation(gpu.pci, n.pci); };
  Relation best = Relation::SYS;
  std::string none;
  std::vector<size_t> eq = nearest(t, o, rel, &best, &none);
  if (eq.empty()) {
    NicPick p;
    p.why = gpu.label() + ": " + none;
    p.gdr_why = "no RDMA device";
    return p;
  }
  // Rail alignment: GPUs whose nearest set is the same set take its devices in turn.
  size_t slot = 0, sharing = 0;
  for (const Gpu& g : t.gpus) {
    Relation gb = Relation::SYS;
    std::string ignored;
    auto grel = [&](const Nic& n) { return pci_relation(g.pci, n.pci); };
    if (nearest(t, o, grel, &gb, &ignored) != eq) continue;
    if (g.pci.busid == gpu.pci.busid) slot = sharing;
    ++sharing;
  }
  NicPick p = make_pick(t, eq, slot, best, o);
  const Nic& nic = *t.find_nic(p.nic);
  p.why = gpu.label() + " -> " + p.nic + " port " + std::to_string(p.port) + ": " +
          relation_name(best) + ", they " + relation_phrase(best);
  if (eq.size() > 1) {
    p.why += "; " + std::to_string(eq.size()) + " devices at this distance (" + names(t, eq) + ")";
    if (sharing > 1)
      p.why += ", GPU " + std::to_string(slot + 1) + " of the " + std::to_string(sharing) +
               " sharing them takes device " + std::to_string(slot % eq.size() + 1);
  }
  if (!nic.verbs_capable())
    p.why += "; " + nic.kind + " device: not usable by the ibverbs transport";
  p.why += nearer_unusable(t, o, rel, best);
  p.gdr = gdr_allowed(gpu, nic, best, o.gdr_level, &p.gdr_why);
  return p;
}

NicPick pick_nic_for_numa(const Topology& t, int numa, int local_rank, const NicOptions& o) {
  auto rel = [&](const Nic& n) { return numa_relation(t, numa, n.pci); };
  Relation best = Relation::SYS;
  std::string none;
  std::vector<size_t> eq = nearest(t, o, rel, &best, &none);
  std::string where = numa >= 0 ? "NUMA " + std::to_string(numa) : "unbound rank";
  if (eq.empty()) {
    NicPick p;
    p.why = where + ": " + none;
    return p;
  }
  size_t slot = static_cast<size_t>(std::max(local_rank, 0));
  NicPick p = make_pick(t, eq, slot, best, o);
  const Nic& nic = *t.find_nic(p.nic);
  p.why = where + " -> " + p.nic + " port " + std::to_string(p.port) + ": " + relation_name(best) +
          ", ";
  if (numa < 0)
    p.why += "the rank is not bound to one NUMA node, so the path may cross the inter-socket link";
  else if (best == Relation::PHB)
    p.why += "the device is attached to this NUMA node";
  else if (best == Relation::NODE)
    p.why += "the device is on another NUMA node of the same package";
  else
    p.why += "the path crosses the inter-socket link (the device is on package " +
             std::to_string(nic.pci.package) + ")";
  if (eq.size() > 1)
    p.why += "; " + std::to_string(eq.size()) + " devices at this distance (" + names(t, eq) +
             "), local rank " + std::to_string(local_rank) + " takes device " +
             std::to_string(slot % eq.size() + 1);
  if (!nic.verbs_capable())
    p.why += "; " + nic.kind + " device: not usable by the ibverbs transport";
  p.why += nearer_unusable(t, o, rel, best);
  return p;
}

}  // namespace tpcomm::topo
