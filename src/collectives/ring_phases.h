// The two passes of ring algorithms, pipelined in slices: reduce-scatter (each step reduces
// a received slice into the local block and forwards it) and all-gather (each step stores a
// received slice and forwards it). Receives are posted `window` slices ahead, and a slice is
// forwarded as soon as it is ready, so that sending, receiving and reducing of different
// slices overlap. Used by all_reduce ring (both passes), reduce_scatter ring and all_gather
// ring.
#pragma once

#include <cstddef>

#include "collectives/comm.h"
#include "collectives/util.h"

namespace tpcomm::coll {

/// In place over `data` (count elements cut into one ring::block per rank): on return, rank
/// r's block r holds the merge of every rank's block r. Other blocks are left partial.
/// With `src` (not null, not `data`), this rank's contribution is read from `src` instead
/// (out of place: `data` need not be loaded first); blocks this rank never merges are left
/// unwritten in `data`, which the all-gather then fills.
void ring_reduce_scatter_inplace(CollComm& comm, void* data, size_t count, const Reducer& red,
                                 const ExecParams& params, int tag, const void* src = nullptr);

/// In place over `data` (count elements of `esize` bytes, one ring::block per rank): rank
/// r's block r is valid on entry; on return every block is.
void ring_all_gather_inplace(CollComm& comm, void* data, size_t count, size_t esize,
                             const ExecParams& params, int tag);

}  // namespace tpcomm::coll
