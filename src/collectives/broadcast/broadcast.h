// broadcast algorithms: byte-level (no dtype); `data` holds `bytes` bytes of the root's
// payload on the root, and receives them everywhere else.
#pragma once

#include <cstddef>
#include <span>

#include "collectives/comm.h"
#include "collectives/types.h"
#include "collectives/util.h"

namespace tpcomm::coll {

std::span<const AlgoInfo> broadcast_catalogue();

void broadcast_binomial(CollComm& comm, void* data, size_t bytes, int root,
                        const ExecParams& params);
void broadcast_ring(CollComm& comm, void* data, size_t bytes, int root, const ExecParams& params);
void broadcast_tree(CollComm& comm, void* data, size_t bytes, int root, const ExecParams& params);

}  // namespace tpcomm::coll
