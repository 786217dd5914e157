// tpinfo --graph: the topology as a Graphviz picture. Packages, NUMA nodes, PCIe host bridges
// and bridges (the ports of PCIe switches), GPUs and RDMA NICs form the tree they are; on it,
// bold edges show the NIC the topology layer chose for each GPU's buffers, green when
// GPUDirect RDMA is used and orange when the data is staged through host memory, and a note
// lists every choice with its reason.
#pragma once

#include <string>

#include "topology/select.h"
#include "topology/topology.h"

namespace tpcomm::tpinfo {

/// The picture as a DOT document.
std::string topology_dot(const topo::Topology& t, const topo::NicOptions& o);

/// Writes `dot` to `path`: as it is for a name ending in .dot, rendered by Graphviz's `dot`
/// program for .svg. Throws InvalidArgument for another extension and Error when the file
/// cannot be written or `dot` is missing or fails.
void write_graph(const std::string& dot, const std::string& path);

}  // namespace tpcomm::tpinfo
