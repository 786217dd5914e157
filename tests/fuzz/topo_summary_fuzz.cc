// Fuzz target: the topology summary a rank reads from the store (and the JSON topology dump)
// come from other processes and files; malformed input must give InvalidArgument, never a
// crash, a hang or an unbounded allocation.
#include <cstdint>
#include <string>
#include <vector>

#include "topology/select.h"
#include "topology/topology.h"
#include "tpcomm/error.hpp"

namespace {

tpcomm::topo::Summary seed_summary() {
  using namespace tpcomm::topo;
  Summary s;
  s.rank = 3;
  s.local_rank = 1;
  s.host_id = "node-a/1234";
  s.numa_count = 2;
  s.numa = 1;
  Gpu g;
  g.pci.busid = "0000:4e:00.0";
  g.pci.path = {"0000:[48-4f]", "0000:48:01.0", "0000:49:00.0", "0000:4a:03.0"};
  g.pci.numa = 1;
  g.pci.package = 0;
  g.cuda_index = 0;
  g.nvlink_peers = {"0000:5f:00.0"};
  s.gpus.push_back(g);
  s.gpu = g.pci.busid;
  Nic n;
  n.name = "mlx5_0";
  n.pci.busid = "0000:4d:00.0";
  n.pci.path = g.pci.path;
  n.kind = "ib";
  n.ports.push_back(NicPort{1, 4, "InfiniBand", "", "", 0});
  s.nics.push_back(n);
  s.gpu_nic.nic = "mlx5_0";
  s.gpu_nic.port = 1;
  s.gpu_nic.relation = Relation::PIX;
  s.gpu_nic.gdr = true;
  s.gpu_nic.why = "cuda0 -> mlx5_0 \"quoted\" \\ \u00e9";
  s.transports = {"shm", "tcp"};
  return s;
}

}  // namespace

extern "C" size_t tpcomm_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  std::string a = tpcomm::topo::summary_to_string(seed_summary());
  tpcomm::topo::Topology t;
  t.hostname = "h";
  t.gpus = seed_summary().gpus;
  t.nics = seed_summary().nics;
  t.numa_nodes.push_back(tpcomm::topo::NumaNode{0, 0, "0-3,8-11", 1u << 30});
  std::string b = tpcomm::topo::to_json(t);
  out->emplace_back(a.begin(), a.end());
  out->emplace_back(b.begin(), b.end());
  return out->size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    tpcomm::topo::Summary s = tpcomm::topo::summary_from_string(text, "fuzz");
    // Whatever parsed must encode and parse back to the same value.
    if (tpcomm::topo::summary_from_string(tpcomm::topo::summary_to_string(s)) != s)
      __builtin_trap();
  } catch (const tpcomm::InvalidArgument&) {
  }
  try {
    tpcomm::topo::Topology t = tpcomm::topo::topology_from_json(text, "fuzz");
    if (tpcomm::topo::topology_from_json(tpcomm::topo::to_json(t)) != t) __builtin_trap();
  } catch (const tpcomm::InvalidArgument&) {
  }
  return 0;
}
