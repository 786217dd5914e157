// The collectives as free functions, torch.distributed style: an optional `group` (null: the
// default group) and an `async_op` flag; roots (src/dst) are global ranks, as in torch. Each
// returns a Work (completed unless async_op). The ProcessGroup methods (process_group.hpp)
// take group ranks and CollectiveOptions.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tpcomm/process_group.hpp"
#include "tpcomm/types.hpp"

namespace tpcomm {

using GroupPtr = std::shared_ptr<ProcessGroup>;

/// Copies `tensor` of global rank `src` into `tensor` on every member.
std::shared_ptr<Work> broadcast(const Tensor& tensor, int src, const GroupPtr& group = nullptr,
                                bool async_op = false);
/// In place: `tensor` = op over the group's ranks.
std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::SUM,
                                 const GroupPtr& group = nullptr, bool async_op = false);
/// In place on global rank `dst`.
std::shared_ptr<Work> reduce(const Tensor& tensor, int dst, ReduceOp op = ReduceOp::SUM,
                             const GroupPtr& group = nullptr, bool async_op = false);
/// tensor_list[i] = group rank i's `tensor`.
std::shared_ptr<Work> all_gather(const std::vector<Tensor>& tensor_list, const Tensor& tensor,
                                 const GroupPtr& group = nullptr, bool async_op = false);
/// output (group size x input.numel) = the inputs in group-rank order.
std::shared_ptr<Work> all_gather_into_tensor(const Tensor& output, const Tensor& input,
                                             const GroupPtr& group = nullptr,
                                             bool async_op = false);
/// On global rank `dst`: gather_list[i] = group rank i's `tensor`.
std::shared_ptr<Work> gather(const Tensor& tensor, const std::vector<Tensor>& gather_list, int dst,
                             const GroupPtr& group = nullptr, bool async_op = false);
/// `tensor` = scatter_list[group rank] of global rank `src`.
std::shared_ptr<Work> scatter(const Tensor& tensor, const std::vector<Tensor>& scatter_list,
                              int src, const GroupPtr& group = nullptr, bool async_op = false);
/// `output` = op over ranks of their input_list[group rank].
std::shared_ptr<Work> reduce_scatter(const Tensor& output, const std::vector<Tensor>& input_list,
                                     ReduceOp op = ReduceOp::SUM, const GroupPtr& group = nullptr,
                                     bool async_op = false);
/// `output` = this rank's block of op over ranks of `input`.
std::shared_ptr<Work> reduce_scatter_tensor(const Tensor& output, const Tensor& input,
                                            ReduceOp op = ReduceOp::SUM,
                                            const GroupPtr& group = nullptr, bool async_op = false);
/// output_tensor_list[i] = group rank i's input_tensor_list[this rank].
std::shared_ptr<Work> all_to_all(const std::vector<Tensor>& output_tensor_list,
                                 const std::vector<Tensor>& input_tensor_list,
                                 const GroupPtr& group = nullptr, bool async_op = false);
/// Block exchange; split sizes in elements per rank (empty: even).
std::shared_ptr<Work> all_to_all_single(const Tensor& output, const Tensor& input,
                                        const std::vector<int64_t>& output_split_sizes = {},
                                        const std::vector<int64_t>& input_split_sizes = {},
                                        const GroupPtr& group = nullptr, bool async_op = false);
/// Returns once every member of the group has entered it.
std::shared_ptr<Work> barrier(const GroupPtr& group = nullptr, bool async_op = false);

}  // namespace tpcomm
