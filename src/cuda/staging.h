// Staging: a CUDA tensor moved by a path that cannot reach device memory goes through pinned
// host memory (device -> pinned -> wire -> pinned -> device). The copies run on the caller's
// stream, so the operation is ordered after the work already queued there, and the copy back
// is queued on that stream too: the stream, not the host, waits for the result (as torch's
// ProcessGroupNCCL). Pinned buffers come from one pool per process (portable pinned memory);
// a buffer whose copy back is still queued returns to the pool when that copy has run.
#pragma once

#include <memory>
#include <string>

#include "tpcomm/types.hpp"

namespace tpcomm::cuda {

/// Throws InvalidArgument when `stream` (an opaque CUstream; nullptr: the legacy default
/// stream) is capturing a CUDA graph: tpcomm's operations synchronise with the host, which a
/// capture cannot contain.
void check_stream(void* stream, const std::string& where);

/// A CUDA tensor's pinned host copy for one operation.
class Staged {
 public:
  /// Checks `t` (cuda::check_device_tensor: device memory of its GPU, else InvalidArgument
  /// naming both) and `stream`, takes a pinned buffer of t.nbytes(), and when `copy_in` copies
  /// the device data into it after the stream's queued work, waiting for that copy.
  Staged(const Tensor& t, void* stream, bool copy_in, const std::string& where);
  ~Staged();
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;

  /// The pinned copy, as a CPU tensor of the same dtype and element count.
  Tensor host() const;
  /// Queues the copy of the pinned data back into the device tensor on the stream (once;
  /// later calls do nothing). The buffer stays out of the pool until that copy has run.
  void copy_out();
  /// Blocks until the work queued on the stream (copy_out's copy included) has run.
  void synchronize();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// Pinned bytes the staging pool holds now (in use, queued or free), for tests.
size_t staging_pool_bytes();

}  // namespace tpcomm::cuda
