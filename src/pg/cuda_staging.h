// CUDA tensors in a process group: every operation moves them by staging through pinned host
// memory (cuda/staging.h) over whatever transport the group uses; reductions run on the host.
// Each ProcessGroup method that sees a CUDA tensor hands the call to its staged_* form here,
// which stages the CUDA tensors (CPU tensors of the same call are used where they are), runs
// the method again on the host copies, and queues the copies back on the operation's stream.
#pragma once

#include <memory>
#include <vector>

#include "tpcomm/process_group.hpp"

namespace tpcomm::detail {

/// True when `t` (or any tensor of `list`) is a CUDA tensor.
inline bool is_cuda(const Tensor& t) { return t.device.type == DeviceType::CUDA; }
bool any_cuda(const std::vector<Tensor>& list);

/// Point-to-point (`async`: isend/irecv), on the legacy default stream.
std::shared_ptr<Work> staged_send(ProcessGroup& pg, const Tensor& t, int dst, int tag, bool async);
std::shared_ptr<Work> staged_recv(ProcessGroup& pg, const Tensor& t, int src, int tag, bool async);

/// Collectives, on o.stream.
std::shared_ptr<Work> staged_broadcast(ProcessGroup& pg, const Tensor& t, int src,
                                       const CollectiveOptions& o);
std::shared_ptr<Work> staged_all_reduce(ProcessGroup& pg, const Tensor& t, ReduceOp op,
                                        const CollectiveOptions& o);
std::shared_ptr<Work> staged_reduce(ProcessGroup& pg, const Tensor& t, int dst, ReduceOp op,
                                    const CollectiveOptions& o);
std::shared_ptr<Work> staged_all_gather(ProcessGroup& pg, const std::vector<Tensor>& outputs,
                                        const Tensor& input, const CollectiveOptions& o);
std::shared_ptr<Work> staged_all_gather_into_tensor(ProcessGroup& pg, const Tensor& output,
                                                    const Tensor& input,
                                                    const CollectiveOptions& o);
std::shared_ptr<Work> staged_gather(ProcessGroup& pg, const Tensor& input,
                                    const std::vector<Tensor>& gather_list, int dst,
                                    const CollectiveOptions& o);
std::shared_ptr<Work> staged_scatter(ProcessGroup& pg, const Tensor& output,
                                     const std::vector<Tensor>& scatter_list, int src,
                                     const CollectiveOptions& o);
std::shared_ptr<Work> staged_reduce_scatter(ProcessGroup& pg, const Tensor& output,
                                            const std::vector<Tensor>& inputs, ReduceOp op,
                                            const CollectiveOptions& o);
std::shared_ptr<Work> staged_reduce_scatter_tensor(ProcessGroup& pg, const Tensor& output,
                                                   const Tensor& input, ReduceOp op,
                                                   const CollectiveOptions& o);
std::shared_ptr<Work> staged_all_to_all(ProcessGroup& pg, const std::vector<Tensor>& outputs,
                                        const std::vector<Tensor>& inputs,
                                        const CollectiveOptions& o);
std::shared_ptr<Work> staged_all_to_all_single(ProcessGroup& pg, const Tensor& output,
                                               const Tensor& input,
                                               const std::vector<int64_t>& output_splits,
                                               const std::vector<int64_t>& input_splits,
                                               const CollectiveOptions& o);

}  // namespace tpcomm::detail
