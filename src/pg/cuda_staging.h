// CUDA tensors in a process group: point-to-point and all_reduce move them by staging through
// pinned host memory (cuda/staging.h) over whatever transport the group uses; the reduction runs
// on the host. The other collectives refuse them (cuda::refuse_device_tensor).
#pragma once

#include <memory>

#include "tpcomm/process_group.hpp"

namespace tpcomm::detail {

/// send (`async`: isend) of a CUDA tensor: the device data is copied to pinned memory (after the
/// legacy stream's work) and sent from there.
std::shared_ptr<Work> staged_send(ProcessGroup& pg, const Tensor& t, int dst, int tag, bool async);

/// recv (`async`: irecv) into a CUDA tensor: received into pinned memory, copied to the device
/// on the legacy stream once the receive completed (wait() or is_completed() queues the copy).
std::shared_ptr<Work> staged_recv(ProcessGroup& pg, const Tensor& t, int src, int tag, bool async);

/// all_reduce of a CUDA tensor on o.stream: copied to pinned memory after the stream's work,
/// reduced by the host collective, copied back on the stream.
std::shared_ptr<Work> staged_all_reduce(ProcessGroup& pg, const Tensor& t, ReduceOp op,
                                        const CollectiveOptions& o);

}  // namespace tpcomm::detail
