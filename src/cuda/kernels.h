// tpcomm's GPU kernels (reduce_kernels.cu, embedded as a fatbin for sm_80, sm_90 and sm_100 plus
// PTX) loaded with cuModuleLoadData once per device and launched with cuLaunchKernel. Every
// launch goes to the device of the calling thread's current context, on `stream` (an opaque
// CUstream; nullptr is the legacy default stream), and returns without waiting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "tpcomm/types.hpp"

namespace tpcomm::cuda {

/// The embedded fatbin (empty in a build without CUDA).
std::span<const unsigned char> kernel_image();

/// The kernel name for (op, dtype): "tpcomm_sum_float16"; AVG maps to sum (the caller divides
/// at the end with launch_div). Throws InvalidArgument for an op the dtype does not support.
std::string reduce_kernel_name(ReduceOp op, DType dtype);

/// dst = op(a, b) over `count` elements of device memory (core/reduce.h's reduce2 semantics;
/// PREMUL_SUM: dst = a + premul_scale * b).
void launch_reduce(void* dst, const void* a, const void* b, size_t count, DType dtype, ReduceOp op,
                   double premul_scale, void* stream);

/// dst = src * factor (floating types).
void launch_scale(void* dst, const void* src, size_t count, DType dtype, double factor,
                  void* stream);

/// dst /= n (floating types; finishes AVG).
void launch_div(void* dst, size_t count, DType dtype, int64_t n, void* stream);

}  // namespace tpcomm::cuda
