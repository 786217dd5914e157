// Internal: the kernel table each ISA path fills (reduce_scalar.cc, reduce_avx2.cc,
// reduce_avx512.cc) and reduce.cc dispatches through. Not for use outside src/core/reduce*.
#pragma once

#include <cstddef>

#include "tpcomm/types.hpp"

namespace tpcomm::kernels::detail {

inline constexpr int kNumOps = 9;  // ReduceOp values

/// dst = op(a, b); `s` is the PREMUL_SUM scale (ignored by other ops). `nt` asks for
/// non-temporal stores (a hint: paths without them ignore it).
using BinaryFn = void (*)(void* dst, const void* a, const void* b, size_t n, double s, bool nt);
/// dst = f(src, s) element-wise: multiply or divide by s.
using UnaryFn = void (*)(void* dst, const void* src, size_t n, double s, bool nt);

/// One path's kernels; null where an op is not defined on a dtype.
struct KernelTable {
  BinaryFn binary[kNumDTypes][kNumOps] = {};
  UnaryFn mul[kNumDTypes] = {};
  UnaryFn div[kNumDTypes] = {};
};

/// Each returns null when the path is not compiled in (non-x86 builds).
const KernelTable* scalar_table();
const KernelTable* avx2_table();
const KernelTable* avx512_table();
/// Only the entries the AVX512-FP16/BF16 path replaces (float16 and bfloat16); others null.
const KernelTable* avx512fp16_table();

}  // namespace tpcomm::kernels::detail
