// all_to_all algorithms: rank r sends send[j] (a byte range of input) to rank j, which
// stores it at its recv[r] (a byte range of output). Input and output do not overlap.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "collectives/comm.h"
#include "collectives/patterns/ring.h"
#include "collectives/types.h"
#include "collectives/util.h"

namespace tpcomm::coll {

std::span<const AlgoInfo> alltoall_catalogue();

/// Byte ranges per peer.
using Layout = std::vector<ring::Range>;

void alltoall_pairwise(CollComm& comm, const void* input, void* output, const Layout& send,
                       const Layout& recv, const ExecParams& params);
void alltoall_linear(CollComm& comm, const void* input, void* output, const Layout& send,
                     const Layout& recv, const ExecParams& params);

}  // namespace tpcomm::coll
