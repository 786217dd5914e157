// Device memory for tools and tests that hold GPU buffers without touching the driver table
// (tpbench --device cuda): allocate on a GPU, copy to and from the host, synchronise.
#pragma once

#include <cstddef>

namespace tpcomm::cuda {

/// `bytes` (at least 1) of device memory on GPU `device`, freed on destruction. Throws
/// NotSupportedError when CUDA is unusable here, Error when the allocation fails.
class DeviceBuffer {
 public:
  DeviceBuffer(size_t bytes, int device);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  int device() const { return device_; }
  /// Copies `bytes` from host memory into the buffer (synchronous, after the legacy stream).
  void upload(const void* src, size_t bytes);
  /// Copies `bytes` of the buffer to host memory (synchronous, after the legacy stream).
  void download(void* dst, size_t bytes) const;

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
};

/// dst = src, `bytes` of device memory, queued on the legacy stream of GPU `device`.
void device_copy(void* dst, const void* src, size_t bytes, int device);

/// Waits for every stream of GPU `device` (cuCtxSynchronize on its primary context).
void device_synchronize(int device);

/// The GPU a process of a node uses by convention: local_rank % the devices it sees. Throws
/// NotSupportedError when CUDA is unusable here.
int device_for_local_rank(int local_rank);

}  // namespace tpcomm::cuda
