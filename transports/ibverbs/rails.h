// Rails of the ibverbs transport: one port per NIC, each with its own context, protection
// domain, completion queue and channel, GID. choose_rails() decides which NICs become rails
// (those at equal, smallest distance from the rank's NUMA node, as the topology layer measures
// it); open_rail() / close_rail() own the verbs objects. See docs/ibverbs.md "Multi-rail".
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "topology/topology.h"
#include "transports/ibverbs/options.h"
#include "transports/ibverbs/verbs_lib.h"

namespace tpcomm::ibv {

class IbvEndpoint;

/// One NIC port in use.
struct Rail {
  PortInfo port;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;
  int cqe = 0;
  ibv_gid gid{};
  int gid_index = 0;
  /// QP number -> (endpoint, flat QP index); QP numbers are unique per device only.
  std::unordered_map<uint32_t, std::pair<IbvEndpoint*, size_t>> by_qpn;
  std::string where() const { return port.device + ":" + std::to_string(port.port); }
};

/// The ports to use as rails, from `ports` (usable_ports(): ACTIVE, allowed by TPCOMM_IB_HCA,
/// device order): one port per device; among devices `t` knows, those at the smallest
/// relation to NUMA node `numa` (-1: unbound) -- devices `t` does not know count only when it
/// knows none of them (then all are at equal distance); at most `max_rails` (0: no limit).
/// `why` gets one line for the log. Pure: tested on stored topologies.
std::vector<PortInfo> choose_rails(const std::vector<PortInfo>& ports, const topo::Topology* t,
                                   int numa, int max_rails, std::string* why);

/// choose_rails on this machine's topology (TPCOMM_TOPO_FILE honoured; discovered once per
/// process and only when more than one device is usable).
std::vector<PortInfo> choose_local_rails(const std::vector<PortInfo>& ports, int max_rails,
                                         std::string* why);

/// Opens `port`'s device and creates PD, completion channel (non-blocking) and CQ, and picks
/// the GID (TPCOMM_IB_GID_INDEX, else RoCE v2 IPv4-mapped, RoCE v2, RoCE v1). Throws
/// NotSupportedError naming the port and the verb that failed (nothing is left open).
Rail open_rail(const VerbsLib& lib, const PortInfo& port, const Options& o, void* cq_context);

/// Destroys what open_rail created (QPs and MRs on it must be gone).
void close_rail(const VerbsLib& lib, Rail& r);

}  // namespace tpcomm::ibv
