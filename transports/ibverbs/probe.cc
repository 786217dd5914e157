// Port listing and filtering: see probe.h.
#include "transports/ibverbs/probe.h"

#include "topology/select.h"
#include "tpcomm/error.hpp"

namespace tpcomm::ibv {

std::vector<PortInfo> usable_ports(const VerbsLib& lib, const Options& o) {
  topo::HcaFilter filter = topo::parse_ib_hca(o.hca);
  std::vector<PortInfo> all = list_ports(lib);
  std::vector<PortInfo> out;
  std::string seen;
  for (const PortInfo& p : all) {
    std::string name = p.device + ":" + std::to_string(p.port);
    if (!filter.allows(p.device, p.port)) {
      seen += (seen.empty() ? "" : ", ") + name + " excluded by TPCOMM_IB_HCA";
      continue;
    }
    if (p.attr.state != IBV_PORT_ACTIVE) {
      seen += (seen.empty() ? "" : ", ") + name + " " + port_state_name(p.attr.state);
      continue;
    }
    out.push_back(p);
  }
  if (out.empty())
    throw NotSupportedError("ibverbs transport: no usable RDMA port (" +
                            (seen.empty() ? std::string("devices have no ports") : seen) +
                            "; library '" + lib.path + "')");
  return out;
}

}  // namespace tpcomm::ibv
