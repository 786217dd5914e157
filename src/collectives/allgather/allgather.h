// all_gather algorithms: every rank contributes `block` bytes (input) and receives all
// blocks in rank order (output, n x block bytes). The input may be this rank's block of the
// output (in place).
#pragma once

#include <cstddef>
#include <span>

#include "collectives/comm.h"
#include "collectives/types.h"
#include "collectives/util.h"

namespace tpcomm::coll {

std::span<const AlgoInfo> allgather_catalogue();

void allgather_ring(CollComm& comm, const void* input, void* output, size_t block,
                    const ExecParams& params);
void allgather_bruck(CollComm& comm, const void* input, void* output, size_t block,
                     const ExecParams& params);

}  // namespace tpcomm::coll
