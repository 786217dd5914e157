// The collectives of ProcessGroup (group ranks) and their free functions (global ranks).
#include "tpcomm/collectives.hpp"

#include "collectives/collectives.h"
#include "collectives/validate.h"
#include "pg/coll_dispatch.h"
#include "pg/coll_run.h"
#include "pg/cuda_staging.h"
#include "tpcomm/error.hpp"

namespace tpcomm {

using detail::CollContext;

namespace {

// The operation's name as every all_reduce call passes it (one pointer: its code is looked up
// once per change of operation).
constexpr const char* kAllReduce = "all_reduce";

coll::CommonOptions common(const CollectiveOptions& o) {
  coll::CommonOptions c;
  c.algorithm = o.algorithm;
  return c;
}

}  // namespace

std::shared_ptr<Work> ProcessGroup::broadcast(const Tensor& tensor, int src,
                                              const CollectiveOptions& o) {
  if (detail::is_cuda(tensor)) [[unlikely]]
    return detail::staged_broadcast(*this, tensor, src, o);
  return detail::run_collective(state_, "broadcast", o, [=](CollContext& c) {
    c.comm.sign(tensor.dtype, tensor.numel, src, -1);
    return detail::run_broadcast(c, {tensor, Tensor{}, src, common(o)});
  });
}

namespace {

const char* all_reduce_body(CollContext& c, const Tensor& tensor, ReduceOp op,
                            const CollectiveOptions& o) {
  c.comm.sign(tensor.dtype, tensor.numel, -1, static_cast<int>(op));
  coll::AllReduceArgs a{tensor, tensor, op, o.premul_scale, {}};
  if (!o.algorithm.empty()) a.options = common(o);
  return detail::run_all_reduce(c, a);
}

}  // namespace

std::shared_ptr<Work> ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op,
                                               const CollectiveOptions& o) {
  if (detail::is_cuda(tensor)) [[unlikely]]
    return detail::staged_all_reduce(*this, tensor, op, o);
  // Blocking: the body runs before returning and reads the arguments where they are (the
  // latency of small all_reduces); async: it keeps copies.
  if (!o.async_op) {
    if (detail::run_tiny_all_reduce(*state_, kAllReduce, tensor, tensor, op, o))
      return detail::done_work();
    return detail::run_collective_now(
        *state_, kAllReduce, o, [&](CollContext& c) { return all_reduce_body(c, tensor, op, o); });
  }
  return detail::run_collective_async(
      state_, kAllReduce, o, [=](CollContext& c) { return all_reduce_body(c, tensor, op, o); });
}

std::shared_ptr<Work> ProcessGroup::reduce(const Tensor& tensor, int dst, ReduceOp op,
                                           const CollectiveOptions& o) {
  if (detail::is_cuda(tensor)) [[unlikely]]
    return detail::staged_reduce(*this, tensor, dst, op, o);
  return detail::run_collective(state_, "reduce", o, [=](CollContext& c) {
    c.comm.sign(tensor.dtype, tensor.numel, dst, static_cast<int>(op));
    return detail::run_reduce(c, {tensor, tensor, dst, op, o.premul_scale, common(o)});
  });
}

std::shared_ptr<Work> ProcessGroup::all_gather(const std::vector<Tensor>& output_list,
                                               const Tensor& input, const CollectiveOptions& o) {
  if (detail::is_cuda(input) || detail::any_cuda(output_list)) [[unlikely]]
    return detail::staged_all_gather(*this, output_list, input, o);
  return detail::run_collective(state_, "all_gather", o, [=](CollContext& c) {
    c.comm.sign(input.dtype, input.numel, -1, -1);
    return coll::all_gather_list(c.comm, input, output_list, common(o)).name;
  });
}

std::shared_ptr<Work> ProcessGroup::all_gather_into_tensor(const Tensor& output,
                                                           const Tensor& input,
                                                           const CollectiveOptions& o) {
  if (detail::is_cuda(output) || detail::is_cuda(input)) [[unlikely]]
    return detail::staged_all_gather_into_tensor(*this, output, input, o);
  return detail::run_collective(state_, "all_gather_into_tensor", o, [=](CollContext& c) {
    c.comm.sign(input.dtype, input.numel, -1, -1);
    return detail::run_all_gather(c, {input, output, common(o)});
  });
}

std::shared_ptr<Work> ProcessGroup::gather(const Tensor& input,
                                           const std::vector<Tensor>& gather_list, int dst,
                                           const CollectiveOptions& o) {
  if (detail::is_cuda(input) || detail::any_cuda(gather_list)) [[unlikely]]
    return detail::staged_gather(*this, input, gather_list, dst, o);
  return detail::run_collective(state_, "gather", o, [=](CollContext& c) {
    c.comm.sign(input.dtype, input.numel, dst, -1);
    return coll::gather_list(c.comm, input, gather_list, dst, common(o)).name;
  });
}

std::shared_ptr<Work> ProcessGroup::scatter(const Tensor& output,
                                            const std::vector<Tensor>& scatter_list, int src,
                                            const CollectiveOptions& o) {
  if (detail::is_cuda(output) || detail::any_cuda(scatter_list)) [[unlikely]]
    return detail::staged_scatter(*this, output, scatter_list, src, o);
  return detail::run_collective(state_, "scatter", o, [=](CollContext& c) {
    c.comm.sign(output.dtype, output.numel, src, -1);
    return coll::scatter_list(c.comm, scatter_list, output, src, common(o)).name;
  });
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(const Tensor& output,
                                                   const std::vector<Tensor>& input_list,
                                                   ReduceOp op, const CollectiveOptions& o) {
  if (detail::is_cuda(output) || detail::any_cuda(input_list)) [[unlikely]]
    return detail::staged_reduce_scatter(*this, output, input_list, op, o);
  return detail::run_collective(state_, "reduce_scatter", o, [=](CollContext& c) {
    c.comm.sign(output.dtype, output.numel, -1, static_cast<int>(op));
    return coll::reduce_scatter_list(c.comm, input_list, output, op, o.premul_scale, common(o))
        .name;
  });
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_tensor(const Tensor& output, const Tensor& input,
                                                          ReduceOp op, const CollectiveOptions& o) {
  if (detail::is_cuda(output) || detail::is_cuda(input)) [[unlikely]]
    return detail::staged_reduce_scatter_tensor(*this, output, input, op, o);
  return detail::run_collective(state_, "reduce_scatter_tensor", o, [=](CollContext& c) {
    c.comm.sign(output.dtype, output.numel, -1, static_cast<int>(op));
    return detail::run_reduce_scatter(c, {input, output, op, o.premul_scale, common(o)});
  });
}

std::shared_ptr<Work> ProcessGroup::all_to_all(const std::vector<Tensor>& output_list,
                                               const std::vector<Tensor>& input_list,
                                               const CollectiveOptions& o) {
  if (detail::any_cuda(output_list) || detail::any_cuda(input_list)) [[unlikely]]
    return detail::staged_all_to_all(*this, output_list, input_list, o);
  return detail::run_collective(state_, "all_to_all", o, [=](CollContext& c) {
    const int n = c.comm.size();
    if (output_list.size() != static_cast<size_t>(n) || input_list.size() != static_cast<size_t>(n))
      throw InvalidArgument("all_to_all (rank " + std::to_string(c.comm.rank()) + "): got " +
                            std::to_string(input_list.size()) + " input and " +
                            std::to_string(output_list.size()) + " output tensors for a group of " +
                            std::to_string(n) + " ranks; pass one tensor per rank in each list");
    if (n > 0) c.comm.sign(input_list[0].dtype, detail::kSignDTypeOnly, -1, -1);
    std::vector<int64_t> send(n), recv(n);
    for (int j = 0; j < n; ++j) {
      coll::check::tensor(input_list[j], "all_to_all", "input_list entry", c.comm.rank());
      coll::check::tensor(output_list[j], "all_to_all", "output_list entry", c.comm.rank());
      send[j] = static_cast<int64_t>(input_list[j].nbytes());
      recv[j] = static_cast<int64_t>(output_list[j].nbytes());
    }
    if (n > 1) detail::agree_all_to_all_sizes(c, "all_to_all", send, recv);
    return coll::all_to_all_list(c.comm, input_list, output_list, common(o)).name;
  });
}

std::shared_ptr<Work> ProcessGroup::all_to_all_single(const Tensor& output, const Tensor& input,
                                                      const std::vector<int64_t>& output_splits,
                                                      const std::vector<int64_t>& input_splits,
                                                      const CollectiveOptions& o) {
  if (detail::is_cuda(output) || detail::is_cuda(input)) [[unlikely]]
    return detail::staged_all_to_all_single(*this, output, input, output_splits, input_splits, o);
  return detail::run_collective(state_, "all_to_all_single", o, [=](CollContext& c) {
    const char* op = "all_to_all_single";
    const int n = c.comm.size(), r = c.comm.rank();
    c.comm.sign(input.dtype, detail::kSignDTypeOnly, -1, -1);
    coll::AllToAllArgs a{input, output, input_splits, output_splits, common(o)};
    if (input_splits.empty() && output_splits.empty()) return coll::all_to_all(c.comm, a).name;
    // Uneven: check locally, then agree on the byte counts before any data moves.
    coll::check::tensor(input, op, "input", r);
    coll::check::tensor(output, op, "output", r);
    coll::check::same_dtype(input, "input", output, "output", op, r);
    auto per_peer = [&](const std::vector<int64_t>& splits, const Tensor& t, const char* what) {
      std::vector<int64_t> bytes(n);
      if (splits.empty()) {
        if (t.numel % n != 0)
          throw InvalidArgument(std::string(op) + " (rank " + std::to_string(r) + "): " + what +
                                " has " + std::to_string(t.numel) +
                                " elements, not divisible by the group size " + std::to_string(n) +
                                "; pass its split sizes");
        for (auto& b : bytes) b = static_cast<int64_t>((t.numel / n) * dtype_size(t.dtype));
      } else {
        coll::check::splits(splits, (std::string(what) + " split sizes").c_str(), n, t.numel, op,
                            r);
        for (int j = 0; j < n; ++j)
          bytes[j] = splits[j] * static_cast<int64_t>(dtype_size(t.dtype));
      }
      return bytes;
    };
    std::vector<int64_t> send = per_peer(input_splits, input, "input");
    std::vector<int64_t> recv = per_peer(output_splits, output, "output");
    if (n > 1) detail::agree_all_to_all_sizes(c, op, send, recv);
    return coll::all_to_all(c.comm, a).name;
  });
}

std::shared_ptr<Work> ProcessGroup::barrier(const CollectiveOptions& o) {
  return detail::run_collective(
      state_, "barrier", o, [=](CollContext& c) { return detail::run_barrier(c, {common(o)}); });
}

// ---- free functions: the default group, global ranks ------------------------------------

namespace {

GroupPtr resolve(const GroupPtr& group) { return group ? group : default_group(); }

CollectiveOptions async(bool async_op) {
  CollectiveOptions o;
  o.async_op = async_op;
  return o;
}

}  // namespace

std::shared_ptr<Work> broadcast(const Tensor& tensor, int src, const GroupPtr& group,
                                bool async_op) {
  GroupPtr g = resolve(group);
  return g->broadcast(tensor, g->group_rank(src), async(async_op));
}

std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op, const GroupPtr& group,
                                 bool async_op) {
  return resolve(group)->all_reduce(tensor, op, async(async_op));
}

std::shared_ptr<Work> reduce(const Tensor& tensor, int dst, ReduceOp op, const GroupPtr& group,
                             bool async_op) {
  GroupPtr g = resolve(group);
  return g->reduce(tensor, g->group_rank(dst), op, async(async_op));
}

std::shared_ptr<Work> all_gather(const std::vector<Tensor>& tensor_list, const Tensor& tensor,
                                 const GroupPtr& group, bool async_op) {
  return resolve(group)->all_gather(tensor_list, tensor, async(async_op));
}

std::shared_ptr<Work> all_gather_into_tensor(const Tensor& output, const Tensor& input,
                                             const GroupPtr& group, bool async_op) {
  return resolve(group)->all_gather_into_tensor(output, input, async(async_op));
}

std::shared_ptr<Work> gather(const Tensor& tensor, const std::vector<Tensor>& gather_list, int dst,
                             const GroupPtr& group, bool async_op) {
  GroupPtr g = resolve(group);
  return g->gather(tensor, gather_list, g->group_rank(dst), async(async_op));
}

std::shared_ptr<Work> scatter(const Tensor& tensor, const std::vector<Tensor>& scatter_list,
                              int src, const GroupPtr& group, bool async_op) {
  GroupPtr g = resolve(group);
  return g->scatter(tensor, scatter_list, g->group_rank(src), async(async_op));
}

std::shared_ptr<Work> reduce_scatter(const Tensor& output, const std::vector<Tensor>& input_list,
                                     ReduceOp op, const GroupPtr& group, bool async_op) {
  return resolve(group)->reduce_scatter(output, input_list, op, async(async_op));
}

std::shared_ptr<Work> reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op,
                                            const GroupPtr& group, bool async_op) {
  return resolve(group)->reduce_scatter_tensor(output, input, op, async(async_op));
}

std::shared_ptr<Work> all_to_all(const std::vector<Tensor>& output_tensor_list,
                                 const std::vector<Tensor>& input_tensor_list,
                                 const GroupPtr& group, bool async_op) {
  return resolve(group)->all_to_all(output_tensor_list, input_tensor_list, async(async_op));
}

std::shared_ptr<Work> all_to_all_single(const Tensor& output, const Tensor& input,
                                        const std::vector<int64_t>& output_split_sizes,
                                        const std::vector<int64_t>& input_split_sizes,
                                        const GroupPtr& group, bool async_op) {
  return resolve(group)->all_to_all_single(output, input, output_split_sizes, input_split_sizes,
                                           async(async_op));
}

std::shared_ptr<Work> barrier(const GroupPtr& group, bool async_op) {
  return resolve(group)->barrier(async(async_op));
}

}  // namespace tpcomm
