// Entry points of the host collectives, for the process group (and tpbench, tests). Each
// validates its arguments (InvalidArgument naming the problem, before any communication),
// picks an algorithm (select.h), runs it over `comm`, and returns the catalogue entry of the
// algorithm that ran. Blocking: the process group runs them on its own thread for async_op.
// Every rank of the group calls the same operation with matching arguments.
#pragma once

#include <vector>

#include "collectives/args.h"
#include "collectives/comm.h"
#include "collectives/types.h"

namespace tpcomm::coll {

const AlgoInfo& broadcast(CollComm& comm, const BroadcastArgs& args);
const AlgoInfo& all_reduce(CollComm& comm, const AllReduceArgs& args);
const AlgoInfo& reduce(CollComm& comm, const ReduceArgs& args);
const AlgoInfo& all_gather(CollComm& comm, const AllGatherArgs& args);
const AlgoInfo& gather(CollComm& comm, const GatherArgs& args);
const AlgoInfo& scatter(CollComm& comm, const ScatterArgs& args);
const AlgoInfo& reduce_scatter(CollComm& comm, const ReduceScatterArgs& args);
const AlgoInfo& all_to_all(CollComm& comm, const AllToAllArgs& args);
const AlgoInfo& barrier(CollComm& comm, const BarrierArgs& args = {});

// List forms (torch's all_gather, gather, scatter, reduce_scatter, all_to_all): the tensors of
// a list all have the input's dtype and size; they are staged through one contiguous buffer
// (no copy when the list already is one contiguous buffer in order).

/// outputs[i] = rank i's input.
const AlgoInfo& all_gather_list(CollComm& comm, const Tensor& input,
                                const std::vector<Tensor>& outputs,
                                const CommonOptions& options = {});
/// On the root, outputs[i] = rank i's input (outputs ignored elsewhere).
const AlgoInfo& gather_list(CollComm& comm, const Tensor& input, const std::vector<Tensor>& outputs,
                            int root, const CommonOptions& options = {});
/// output = the root's inputs[rank] (inputs ignored elsewhere).
const AlgoInfo& scatter_list(CollComm& comm, const std::vector<Tensor>& inputs,
                             const Tensor& output, int root, const CommonOptions& options = {});
/// output = op over ranks of inputs[rank].
const AlgoInfo& reduce_scatter_list(CollComm& comm, const std::vector<Tensor>& inputs,
                                    const Tensor& output, ReduceOp op, double premul_scale = 1.0,
                                    const CommonOptions& options = {});
/// outputs[i] = rank i's inputs[rank]; the tensors may differ in size (as torch's all_to_all).
const AlgoInfo& all_to_all_list(CollComm& comm, const std::vector<Tensor>& inputs,
                                const std::vector<Tensor>& outputs,
                                const CommonOptions& options = {});

}  // namespace tpcomm::coll
