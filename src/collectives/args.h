// The arguments of each collective, as the process group hands them over. Tensors are
// non-owning views; "in place" means the output is the input (or, for the gathering and
// scattering operations, the input is this rank's block of the output, as in NCCL).
#pragma once

#include <cstdint>
#include <vector>

#include "collectives/types.h"
#include "tpcomm/types.hpp"

namespace tpcomm::coll {

/// broadcast: `tensor` on every rank receives the root's data. The root's source is `input`
/// when given (out of place), else `tensor` itself.
struct BroadcastArgs {
  Tensor tensor;
  Tensor input;  ///< root only, optional (data == nullptr: use `tensor`)
  int root = 0;
  CommonOptions options;
};

/// all_reduce: output = op over ranks of input (output.data == input.data: in place).
struct AllReduceArgs {
  Tensor input;
  Tensor output;
  ReduceOp op = ReduceOp::SUM;
  double premul_scale = 1.0;  ///< PREMUL_SUM's factor
  CommonOptions options;
};

/// reduce: the root's output = op over ranks of input. Other ranks' buffers are unchanged.
struct ReduceArgs {
  Tensor input;
  Tensor output;  ///< root only (may be input)
  int root = 0;
  ReduceOp op = ReduceOp::SUM;
  double premul_scale = 1.0;
  CommonOptions options;
};

/// all_gather_into_tensor: output (size x input.numel) = the inputs in rank order.
struct AllGatherArgs {
  Tensor input;
  Tensor output;
  CommonOptions options;
};

/// gather: the root's output (size x input.numel) = the inputs in rank order.
struct GatherArgs {
  Tensor input;
  Tensor output;  ///< root only
  int root = 0;
  CommonOptions options;
};

/// scatter: rank r's output = block r of the root's input (size x output.numel).
struct ScatterArgs {
  Tensor input;  ///< root only
  Tensor output;
  int root = 0;
  CommonOptions options;
};

/// reduce_scatter_tensor: output = block `rank` of op over ranks of input (size x
/// output.numel).
struct ReduceScatterArgs {
  Tensor input;
  Tensor output;
  ReduceOp op = ReduceOp::SUM;
  double premul_scale = 1.0;
  CommonOptions options;
};

/// all_to_all_single: rank r sends input block j to rank j, which stores it as its output
/// block r. Split sizes are element counts per peer; both empty: even blocks.
struct AllToAllArgs {
  Tensor input;
  Tensor output;
  std::vector<int64_t> input_splits;
  std::vector<int64_t> output_splits;
  CommonOptions options;
};

/// barrier: returns on each rank once every rank has entered it.
struct BarrierArgs {
  CommonOptions options;
};

}  // namespace tpcomm::coll
