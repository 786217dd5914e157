// Staging of CUDA tensors through pinned host memory: see staging.h.
#include "cuda/staging.h"

#include "cuda/cuda.h"
#include "tpcomm/error.hpp"
#include "tpcomm/version.hpp"

#if TPCOMM_HAVE_CUDA
#include <map>
#include <mutex>
#include <vector>

#include "cuda/driver.h"
#endif

namespace tpcomm::cuda {

#if !TPCOMM_HAVE_CUDA

struct Staged::Impl {};

void check_stream(void*, const std::string& where) {
  throw NotSupportedError(where + ": CUDA streams need a build with CUDA (" +
                          std::string(build_reason()) + ")");
}

Staged::Staged(const Tensor& t, void*, bool, const std::string& where) {
  check_device_tensor(t, where);  // throws: no CUDA here
  throw NotSupportedError(where + ": no CUDA in this build");
}
Staged::~Staged() = default;
Tensor Staged::host() const { return {}; }
void Staged::copy_out() {}
void Staged::synchronize() {}
size_t staging_pool_bytes() { return 0; }

#else

namespace {

// Pinned blocks by size; blocks whose last copy is still queued wait with an event.
class Pool {
 public:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
  };

  Block take(const Driver& d, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    reap(d);
    auto it = free_.lower_bound(bytes);
    if (it != free_.end() && it->first <= 2 * bytes + (size_t{64} << 10)) {
      Block b{it->second, it->first};
      free_.erase(it);
      return b;
    }
    Block b;
    b.size = bytes < 4096 ? 4096 : bytes;
    check(d, d.MemHostAlloc(&b.ptr, b.size, CU_MEMHOSTALLOC_PORTABLE),
          "cuda staging: cuMemHostAlloc (pinned host memory)");
    total_ += b.size;
    return b;
  }

  // Back to the pool now, or once `event` (recorded after the block's last copy) completed.
  void give(const Driver& d, Block b, CUevent event) {
    std::lock_guard<std::mutex> lock(mu_);
    if (event == nullptr) {
      free_.emplace(b.size, b.ptr);
    } else {
      queued_.push_back({b, event});
    }
  }

  size_t total() {
    std::lock_guard<std::mutex> lock(mu_);
    return total_;
  }

 private:
  void reap(const Driver& d) {
    for (size_t i = 0; i < queued_.size();) {
      if (d.EventQuery(queued_[i].second) == CUDA_ERROR_NOT_READY) {
        ++i;
        continue;
      }
      d.EventDestroy(queued_[i].second);
      free_.emplace(queued_[i].first.size, queued_[i].first.ptr);
      queued_[i] = queued_.back();
      queued_.pop_back();
    }
  }

  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::vector<std::pair<Block, CUevent> > queued_;
  size_t total_ = 0;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: buffers may be in flight at exit
  return *p;
}

}  // namespace

struct Staged::Impl {
  const Driver* d = nullptr;
  Tensor device;
  CUstream stream = nullptr;
  Pool::Block block;
  CUevent after_copy_out = nullptr;
  bool copied_out = false;
};

void check_stream(void* stream, const std::string& where) {
  const Driver& d = driver();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  check(d, d.StreamIsCapturing(static_cast<CUstream>(stream), &status), "cuStreamIsCapturing");
  if (status != CU_STREAM_CAPTURE_STATUS_NONE) {
    throw InvalidArgument(where +
                          ": the stream is capturing a CUDA graph; tpcomm's operations "
                          "synchronise with the host and cannot be captured (run them "
                          "outside the capture)");
  }
}

Staged::Staged(const Tensor& t, void* stream, bool copy_in, const std::string& where)
    : impl_(std::make_unique<Impl>()) {
  check_device_tensor(t, where);
  const Driver& d = driver();
  use_device(d, t.device.index);
  check_stream(stream, where);
  impl_->d = &d;
  impl_->device = t;
  impl_->stream = static_cast<CUstream>(stream);
  impl_->block = pool().take(d, t.nbytes());
  if (copy_in && t.nbytes() > 0) {
    check(d,
          d.MemcpyDtoHAsync(impl_->block.ptr, reinterpret_cast<CUdeviceptr>(t.data), t.nbytes(),
                            impl_->stream),
          "cuda staging: cuMemcpyDtoHAsync");
    check(d, d.StreamSynchronize(impl_->stream), "cuda staging: cuStreamSynchronize");
  }
}

Staged::~Staged() {
  if (impl_ && impl_->block.ptr) pool().give(*impl_->d, impl_->block, impl_->after_copy_out);
}

Tensor Staged::host() const {
  return Tensor::raw(impl_->block.ptr, impl_->device.numel, impl_->device.dtype);
}

void Staged::copy_out() {
  if (impl_->copied_out) return;
  impl_->copied_out = true;
  const Driver& d = *impl_->d;
  const Tensor& t = impl_->device;
  if (t.nbytes() == 0) return;
  use_device(d, t.device.index);
  check(d,
        d.MemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(t.data), impl_->block.ptr, t.nbytes(),
                          impl_->stream),
        "cuda staging: cuMemcpyHtoDAsync");
  // Without the event the buffer could go back to the pool under the queued copy: wait for
  // the copy instead.
  if (d.EventCreate(&impl_->after_copy_out, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    impl_->after_copy_out = nullptr;
    check(d, d.StreamSynchronize(impl_->stream), "cuda staging: cuStreamSynchronize");
    return;
  }
  if (CUresult r = d.EventRecord(impl_->after_copy_out, impl_->stream); r != CUDA_SUCCESS) {
    d.EventDestroy(impl_->after_copy_out);
    impl_->after_copy_out = nullptr;
    check(d, d.StreamSynchronize(impl_->stream), "cuda staging: cuStreamSynchronize");
  }
}

void Staged::synchronize() {
  const Driver& d = *impl_->d;
  use_device(d, impl_->device.device.index);
  check(d, d.StreamSynchronize(impl_->stream), "cuda staging: cuStreamSynchronize");
}

size_t staging_pool_bytes() { return pool().total(); }

#endif

}  // namespace tpcomm::cuda
