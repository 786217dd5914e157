// reduce algorithms. `work` holds this rank's contribution (loaded) on every rank and may be
// overwritten; on return the root's `work` holds the merge over all ranks.
#pragma once

#include <cstddef>
#include <span>

#include "collectives/comm.h"
#include "collectives/types.h"
#include "collectives/util.h"

namespace tpcomm::coll {

std::span<const AlgoInfo> reduce_catalogue();

void reduce_binomial(CollComm& comm, void* work, size_t count, int root, const Reducer& red,
                     const ExecParams& params);
void reduce_tree(CollComm& comm, void* work, size_t count, int root, const Reducer& red,
                 const ExecParams& params);

}  // namespace tpcomm::coll
