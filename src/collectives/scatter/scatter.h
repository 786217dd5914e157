// scatter algorithms: the root holds n blocks of `block` bytes (input, root only); rank r
// receives block r (output). The root's output may be its block of the input (in place).
#pragma once

#include <cstddef>
#include <span>

#include "collectives/comm.h"
#include "collectives/types.h"
#include "collectives/util.h"

namespace tpcomm::coll {

std::span<const AlgoInfo> scatter_catalogue();

void scatter_binomial(CollComm& comm, const void* input, void* output, size_t block, int root,
                      const ExecParams& params);
void scatter_linear(CollComm& comm, const void* input, void* output, size_t block, int root,
                    const ExecParams& params);

}  // namespace tpcomm::coll
