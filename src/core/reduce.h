// Reduction kernels: the element-wise arithmetic every collective calls (all_reduce,
// reduce, reduce_scatter) on host memory. One call reduces one chunk on the calling thread;
// callers pipeline chunks, so the kernels never start threads.
//
// Semantics (identical on every ISA path, bit for bit):
// - Integers wrap (two's complement), as torch does.
// - Float16 and BFloat16 are widened to float32, combined, and rounded back to nearest even
//   exactly as the Half and BFloat16 structs of tpcomm/types.hpp round. Float32 is combined in
//   float32, Float64 in float64; one operation is one rounding (no fused multiply-add).
// - MIN and MAX on floating types propagate NaN: if either input is NaN the result is NaN.
//   The payload and sign of a NaN result are not specified.
// - Bool: SUM and MAX are logical or, PRODUCT and MIN logical and, BAND/BOR/BXOR act on the
//   truth values; any non-zero byte reads as true and results are 0 or 1.
// - AVG reduces as SUM; the caller divides once at the end (finish_avg). PREMUL_SUM adds
//   inputs multiplied by a scale factor (see reduce2).
// - Bitwise ops take integer and bool tensors only; AVG and PREMUL_SUM take floating-point
//   tensors only (as torch); anything else throws InvalidArgument (see reduce_op_supports).
// Pointers need no particular alignment. dst may be the very same pointer as an input, but
// must not overlap an input partially.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tpcomm/types.hpp"

namespace tpcomm::kernels {

/// Instruction-set path of the kernels. TPCOMM_REDUCE_ISA forces one; tests run them all.
/// Avx512Fp16 is Avx512 plus the 16-bit float extensions of Sapphire Rapids and later:
/// float16 arithmetic on half-precision lanes (AVX512-FP16) and the bfloat16 convert
/// (AVX512-BF16); the results are the same bits.
enum class ReduceIsa : uint8_t { Scalar, Avx2, Avx512, Avx512Fp16 };

/// Number of ReduceIsa values.
inline constexpr int kNumReduceIsas = 4;

/// "scalar", "avx2", "avx512", "avx512fp16".
const char* isa_name(ReduceIsa isa);

/// True when this build contains the path and this CPU (and OS) can run it.
bool isa_supported(ReduceIsa isa);

/// The path the plain entry points use: TPCOMM_REDUCE_ISA (auto = the widest supported),
/// resolved on first use. A forced path the CPU lacks falls back, with a logged warning.
ReduceIsa active_isa();

/// Re-resolves active_isa() from the registry (call after config::reload()).
ReduceIsa reload_isa();

/// Throws InvalidArgument, naming the op and dtype and saying what is accepted, when `op`
/// is not defined on `dtype`.
void check_reduce_op(ReduceOp op, DType dtype);

/// dst = op(a, b) element-wise over `count` elements. For PREMUL_SUM, `a` is the running
/// (already scaled) accumulator and `b` a fresh input: dst = a + premul_scale * b. The scale
/// is applied in the compute type (float32 for 16- and 32-bit floats, float64 for Float64).
/// An out-of-place result of nt_threshold() bytes or more is written with streaming stores
/// (faster, but it is not left in the caches).
void reduce2(void* dst, const void* a, const void* b, size_t count, DType dtype, ReduceOp op,
             double premul_scale = 1.0);

/// dst = op(dst, src) in place: reduce2(dst, dst, src, ...).
void reduce_into(void* dst, const void* src, size_t count, DType dtype, ReduceOp op,
                 double premul_scale = 1.0);

/// dst = src * factor (floating types only; dst may be src). Starts a PREMUL_SUM accumulator
/// from the local input.
void scale(void* dst, const void* src, size_t count, DType dtype, double factor);

/// dst *= factor in place (floating types only).
void scale_into(void* dst, size_t count, DType dtype, double factor);

/// Finishes AVG: dst /= n (a true division, not a multiplication by 1/n). Floating types
/// only; n must be positive.
void finish_avg(void* dst, size_t count, DType dtype, int64_t n);

/// The same operations on an explicit path (tests, benchmarks). An unsupported `isa`
/// throws NotSupportedError. `nt_threshold` (bytes written) selects non-temporal stores for
/// outputs at least that large; SIZE_MAX never uses them.
void reduce2_on(ReduceIsa isa, void* dst, const void* a, const void* b, size_t count, DType dtype,
                ReduceOp op, double premul_scale, size_t nt_threshold);
void scale_on(ReduceIsa isa, void* dst, const void* src, size_t count, DType dtype, double factor);
void finish_avg_on(ReduceIsa isa, void* dst, size_t count, DType dtype, int64_t n);

/// Output size (bytes) from which the plain entry points use non-temporal stores for an
/// out-of-place result (TPCOMM_REDUCE_NT_THRESHOLD; re-read by reload_isa()).
size_t nt_threshold();

}  // namespace tpcomm::kernels
