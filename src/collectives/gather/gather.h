// gather algorithms: every rank contributes `block` bytes (input); the root receives all
// blocks in rank order (output, n x block bytes, root only). The root's input may be its
// block of the output (in place).
#pragma once

#include <cstddef>
#include <span>

#include "collectives/comm.h"
#include "collectives/types.h"
#include "collectives/util.h"

namespace tpcomm::coll {

std::span<const AlgoInfo> gather_catalogue();

void gather_binomial(CollComm& comm, const void* input, void* output, size_t block, int root,
                     const ExecParams& params);
void gather_linear(CollComm& comm, const void* input, void* output, size_t block, int root,
                   const ExecParams& params);

}  // namespace tpcomm::coll
