// The GPU reduction kernels: one per (op, dtype) of reduce_device.h's list, each a grid-stride
// loop over the shared element arithmetic. Built by nvcc into a fatbin embedded in libtpcomm
// (kernels.cc), loaded with cuModuleLoadData: no cudart.
#include "cuda/reduce_device.h"

using namespace tpcomm::cuda::dev;

#define TPCOMM_THREAD_FIRST (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x)
#define TPCOMM_THREAD_STEP (static_cast<uint64_t>(gridDim.x) * blockDim.x)

#define TPCOMM_DEFINE_BINARY(op, dt, Tr, Op)                                                  \
  extern "C" __global__ void tpcomm_##op##_##dt(void* dst, const void* a, const void* b,     \
                                                unsigned long long n, double scale) {        \
    binary_body<Tr, Op>(TPCOMM_THREAD_FIRST, TPCOMM_THREAD_STEP, dst, a, b, n, scale);       \
  }
#define TPCOMM_DEFINE_UNARY(op, dt, Tr, Op)                                                   \
  extern "C" __global__ void tpcomm_##op##_##dt(void* dst, const void* src,                  \
                                                unsigned long long n, double scale) {        \
    unary_body<Tr, Op>(TPCOMM_THREAD_FIRST, TPCOMM_THREAD_STEP, dst, src, n, scale);         \
  }

TPCOMM_CUDA_BINARY_KERNELS(TPCOMM_DEFINE_BINARY)
TPCOMM_CUDA_UNARY_KERNELS(TPCOMM_DEFINE_UNARY)
