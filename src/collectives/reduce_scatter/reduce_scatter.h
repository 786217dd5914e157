// reduce_scatter algorithms. `work` holds this rank's n x count contribution (loaded) and may
// be overwritten; on return `output` (count elements) holds block `rank` of the merge over
// all ranks (AVG's division is left to the caller).
#pragma once

#include <cstddef>
#include <span>

#include "collectives/comm.h"
#include "collectives/types.h"
#include "collectives/util.h"

namespace tpcomm::coll {

std::span<const AlgoInfo> reduce_scatter_catalogue();

void reduce_scatter_ring(CollComm& comm, void* work, void* output, size_t count, const Reducer& red,
                         const ExecParams& params);
void reduce_scatter_recursive_halving(CollComm& comm, void* work, void* output, size_t count,
                                      const Reducer& red, const ExecParams& params);

}  // namespace tpcomm::coll
