// Device memory for tools: see device_buffer.h.
#include "cuda/device_buffer.h"

#include "cuda/cuda.h"
#include "tpcomm/error.hpp"
#include "tpcomm/version.hpp"

#if TPCOMM_HAVE_CUDA
#include "cuda/driver.h"
#endif

namespace tpcomm::cuda {

#if !TPCOMM_HAVE_CUDA

namespace {
[[noreturn]] void unusable() {
  throw NotSupportedError("cuda: device memory needs CUDA: " + driver_status().reason);
}
}  // namespace

DeviceBuffer::DeviceBuffer(size_t, int) { unusable(); }
DeviceBuffer::~DeviceBuffer() = default;
void DeviceBuffer::upload(const void*, size_t) {}
void DeviceBuffer::download(void*, size_t) const {}
void device_copy(void*, const void*, size_t, int) { unusable(); }
void device_synchronize(int) { unusable(); }
int device_for_local_rank(int) { unusable(); }

#else

DeviceBuffer::DeviceBuffer(size_t bytes, int device) : bytes_(bytes ? bytes : 1), device_(device) {
  const Driver& d = driver();
  use_device(d, device);
  CUdeviceptr p = 0;
  check(d, d.MemAlloc(&p, bytes_), ("cuMemAlloc of " + std::to_string(bytes_) + " bytes").c_str());
  ptr_ = reinterpret_cast<void*>(p);
}

DeviceBuffer::~DeviceBuffer() {
  const Driver& d = driver();
  use_device(d, device_);
  d.MemFree(reinterpret_cast<CUdeviceptr>(ptr_));
}

void DeviceBuffer::upload(const void* src, size_t bytes) {
  if (bytes == 0) return;
  const Driver& d = driver();
  use_device(d, device_);
  check(d, d.MemcpyHtoD(reinterpret_cast<CUdeviceptr>(ptr_), src, bytes), "cuMemcpyHtoD");
}

void DeviceBuffer::download(void* dst, size_t bytes) const {
  if (bytes == 0) return;
  const Driver& d = driver();
  use_device(d, device_);
  check(d, d.MemcpyDtoH(dst, reinterpret_cast<CUdeviceptr>(ptr_), bytes), "cuMemcpyDtoH");
}

void device_copy(void* dst, const void* src, size_t bytes, int device) {
  if (bytes == 0) return;
  const Driver& d = driver();
  use_device(d, device);
  check(d,
        d.MemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src),
                          bytes, nullptr),
        "cuMemcpyDtoDAsync");
}

void device_synchronize(int device) {
  const Driver& d = driver();
  use_device(d, device);
  check(d, d.CtxSynchronize(), "cuCtxSynchronize");
}

int device_for_local_rank(int local_rank) {
  const DriverStatus& st = driver_status();
  if (!st.usable) throw NotSupportedError("cuda: " + st.reason);
  return (local_rank < 0 ? 0 : local_rank) % st.devices;
}

#endif

}  // namespace tpcomm::cuda
