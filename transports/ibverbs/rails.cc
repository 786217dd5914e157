// Rails: see rails.h.
#include "transports/ibverbs/rails.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>

#include "core/log.h"
#include "topology/select.h"
#include "tpcomm/error.hpp"

namespace tpcomm::ibv {

std::vector<PortInfo> choose_rails(const std::vector<PortInfo>& ports, const topo::Topology* t,
                                   int numa, int max_rails, std::string* why) {
  std::vector<PortInfo> one;  // first usable port of each device
  for (const PortInfo& p : ports)
    if (std::none_of(one.begin(), one.end(),
                     [&](const PortInfo& q) { return q.device == p.device; }))
      one.push_back(p);
  std::vector<topo::Relation> rel(one.size(), topo::Relation::SYS);
  std::vector<bool> known(one.size(), false);
  bool any_known = false;
  for (size_t i = 0; i < one.size() && t != nullptr; ++i)
    if (const topo::Nic* n = t->find_nic(one[i].device)) {
      known[i] = any_known = true;
      rel[i] = topo::numa_relation(*t, numa, n->pci);
    }
  std::vector<PortInfo> out;
  std::string text;
  if (!any_known) {
    out = one;
    text = one.size() > 1 ? "the topology knows none of the devices: all at equal distance" : "";
  } else {
    topo::Relation best = topo::Relation::SYS;
    for (size_t i = 0; i < one.size(); ++i)
      if (known[i]) best = std::min(best, rel[i]);
    for (size_t i = 0; i < one.size(); ++i) {
      if (known[i] && rel[i] == best)
        out.push_back(one[i]);
      else
        text += std::string(text.empty() ? "" : ", ") + one[i].device + " " +
                (known[i] ? topo::relation_name(rel[i]) : "unknown to the topology");
    }
    text = std::string("nearest devices at ") + topo::relation_name(best) +
           (text.empty() ? "" : "; not used: " + text);
  }
  if (max_rails > 0 && static_cast<int>(out.size()) > max_rails) {
    out.resize(static_cast<size_t>(max_rails));
    text += (text.empty() ? "" : "; ") + std::string("TPCOMM_IB_MAX_RAILS=") +
            std::to_string(max_rails);
  }
  if (why) *why = text;
  return out;
}

std::vector<PortInfo> choose_local_rails(const std::vector<PortInfo>& ports, int max_rails,
                                         std::string* why) {
  bool several = false;
  for (const PortInfo& p : ports) several |= p.device != ports.front().device;
  if (!several || max_rails == 1) return choose_rails(ports, nullptr, -1, max_rails, why);
  static std::mutex mu;
  static std::optional<topo::Topology> machine;
  static bool tried = false;
  std::lock_guard<std::mutex> lk(mu);
  if (!tried) {
    tried = true;
    try {
      machine = topo::load_configured();
    } catch (const std::exception& e) {
      TPLOG(WARN, IBVERBS) << "no topology for the rail choice (" << e.what()
                           << "): every device counts as equally near";
    }
  }
  if (!machine) return choose_rails(ports, nullptr, -1, max_rails, why);
  int numa = topo::numa_of_cpus(*machine, topo::current_cpus());
  return choose_rails(ports, &*machine, numa, max_rails, why);
}

namespace {
std::string errno_text(int e) {
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}
}  // namespace

void close_rail(const VerbsLib& lib, Rail& r) {
  if (r.cq) lib.destroy_cq(r.cq);
  if (r.channel) lib.destroy_comp_channel(r.channel);
  if (r.pd) lib.dealloc_pd(r.pd);
  if (r.ctx) lib.close_device(r.ctx);
  r.cq = nullptr, r.channel = nullptr, r.pd = nullptr, r.ctx = nullptr;
}

Rail open_rail(const VerbsLib& lib, const PortInfo& port, const Options& o, void* cq_context) {
  Rail r;
  r.port = port;
  int n = 0;
  ibv_device** list = lib.get_device_list(&n);
  for (int i = 0; i < n && r.ctx == nullptr; ++i)
    if (port.device == lib.get_device_name(list[i])) r.ctx = lib.open_device(list[i]);
  lib.free_device_list(list);
  if (r.ctx == nullptr)
    throw NotSupportedError("ibverbs transport: cannot open " + r.where() + ": " +
                            errno_text(errno));
  auto cleanup = [&](const std::string& what) {
    int e = errno;
    close_rail(lib, r);
    throw NotSupportedError("ibverbs transport: " + what + " on " + r.where() +
                            " failed: " + errno_text(e));
  };
  r.pd = lib.alloc_pd(r.ctx);
  if (r.pd == nullptr) cleanup("ibv_alloc_pd");
  r.channel = lib.create_comp_channel(r.ctx);
  if (r.channel == nullptr) cleanup("ibv_create_comp_channel");
  fcntl(r.channel->fd, F_SETFL, fcntl(r.channel->fd, F_GETFL) | O_NONBLOCK);
  ibv_device_attr da{};
  lib.query_device(r.ctx, &da);
  r.cqe = std::min(da.max_cqe > 0 ? da.max_cqe : 4096, 65536);
  r.cq = lib.create_cq(r.ctx, r.cqe, cq_context, r.channel, 0);
  if (r.cq == nullptr) cleanup("ibv_create_cq");
  // GID: TPCOMM_IB_GID_INDEX, else RoCE v2 IPv4-mapped, RoCE v2, RoCE v1 / IB, first non-zero.
  if (port.roce()) {
    int best = -1, best_rank = 99;
    for (int i = 0; i < port.attr.gid_tbl_len; ++i) {
      ibv_gid g{};
      if (lib.query_gid(r.ctx, static_cast<uint8_t>(port.port), i, &g) != 0) continue;
      static const uint8_t zero[16] = {};
      if (std::memcmp(g.raw, zero, 16) == 0) continue;
      uint32_t type = IBV_GID_TYPE_ROCE_V1;
      if (lib.query_gid_ex != nullptr) {
        ibv_gid_entry e{};
        if (lib.query_gid_ex(r.ctx, port.port, i, &e, 0, sizeof(e)) == 0) type = e.gid_type;
      }
      bool v4 = std::all_of(g.raw, g.raw + 10, [](uint8_t b) { return b == 0; }) &&
                g.raw[10] == 0xff && g.raw[11] == 0xff;
      int rank = type == IBV_GID_TYPE_ROCE_V2 ? (v4 ? 0 : 1) : 2;
      if (i == o.gid_index) rank = -1;
      if (rank < best_rank) best = i, best_rank = rank;
    }
    if (o.gid_index >= 0 && best != o.gid_index)
      cleanup("TPCOMM_IB_GID_INDEX=" + std::to_string(o.gid_index) + " (no such GID; table has " +
              std::to_string(port.attr.gid_tbl_len) + " entries)");
    if (best < 0) cleanup("finding a RoCE GID");
    r.gid_index = best;
  } else {
    r.gid_index = std::max(0, o.gid_index);
  }
  lib.query_gid(r.ctx, static_cast<uint8_t>(port.port), r.gid_index, &r.gid);
  return r;
}

}  // namespace tpcomm::ibv
