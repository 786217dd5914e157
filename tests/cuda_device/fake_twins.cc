// Host twins of tpcomm's GPU kernels (src/cuda/reduce_kernels.cu) for the fake driver: the same
// bodies (src/cuda/reduce_device.h), run thread by thread over the launch's grid.
#include <cstring>

#include "cuda/reduce_device.h"
#include "cuda_device/fake_internal.h"
#include "cuda_device/fake_kernels.h"

namespace fake {

namespace {

using namespace tpcomm::cuda::dev;

template <class T>
T param(const Launch& l, int i) {
  T v;
  std::memcpy(&v, l.params[i], sizeof v);
  return v;
}

template <class Tr, template <class> class Op>
CUresult prepare_binary(const Launch& l, const Translate& translate, std::function<void()>* run) {
  const auto n = param<unsigned long long>(l, 3);
  const auto scale = param<double>(l, 4);
  const size_t bytes = n * sizeof(typename Tr::S);
  void* d = nullptr;
  void* a = nullptr;
  void* b = nullptr;
  if (n > 0) {
    d = translate(param<CUdeviceptr>(l, 0), bytes);
    a = translate(param<CUdeviceptr>(l, 1), bytes);
    b = translate(param<CUdeviceptr>(l, 2), bytes);
    if (d == nullptr || a == nullptr || b == nullptr) return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t threads = l.threads();
  *run = [=] {
    for (size_t t = 0; t < threads; ++t) binary_body<Tr, Op>(t, threads, d, a, b, n, scale);
  };
  return CUDA_SUCCESS;
}

template <class Tr, template <class> class Op>
CUresult prepare_unary(const Launch& l, const Translate& translate, std::function<void()>* run) {
  const auto n = param<unsigned long long>(l, 2);
  const auto scale = param<double>(l, 3);
  const size_t bytes = n * sizeof(typename Tr::S);
  void* d = nullptr;
  void* s = nullptr;
  if (n > 0) {
    d = translate(param<CUdeviceptr>(l, 0), bytes);
    s = translate(param<CUdeviceptr>(l, 1), bytes);
    if (d == nullptr || s == nullptr) return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t threads = l.threads();
  *run = [=] {
    for (size_t t = 0; t < threads; ++t) unary_body<Tr, Op>(t, threads, d, s, n, scale);
  };
  return CUDA_SUCCESS;
}

}  // namespace

void register_twins() {
#define FAKE_BINARY(op, dt, Tr, Op) register_kernel("tpcomm_" #op "_" #dt, &prepare_binary<Tr, Op>);
#define FAKE_UNARY(op, dt, Tr, Op) register_kernel("tpcomm_" #op "_" #dt, &prepare_unary<Tr, Op>);
  TPCOMM_CUDA_BINARY_KERNELS(FAKE_BINARY)
  TPCOMM_CUDA_UNARY_KERNELS(FAKE_UNARY)
#undef FAKE_BINARY
#undef FAKE_UNARY
}

}  // namespace fake
