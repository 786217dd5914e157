// The 16-bit float kernels of Sapphire Rapids and later (AVX512-FP16 + AVX512-BF16), laid
// over the AVX-512 table by reduce.cc:
// - float16 SUM, AVG, PRODUCT, MIN and MAX computed on half-precision lanes directly, 32 per
//   instruction, instead of widening to float32 and narrowing back (3x less work). The
//   results are bit-identical to the float32 route of every other path: for one addition or
//   multiplication of two binary16 values, rounding the float32 result again to binary16
//   gives the correctly rounded binary16 result (float32 has 24 >= 2 * 11 + 2 significand
//   bits, so the double rounding is innocuous; sums and products in the subnormal range are
//   exact in float32), which is what the FP16 instructions compute. NaN results are
//   canonicalized as Half(float) does. PREMUL_SUM and the scaling helpers keep the float32
//   route (the scale is a float32 value).
// - bfloat16: every op computes in float32 as elsewhere; the narrowing back uses the
//   hardware convert (one instruction for 32 values) where no float32 subnormal is involved.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/reduce_table.h"
#include "tpcomm/types.hpp"

// _Float16 exists on x86 from GCC 12 and Clang 15 (which then define __FLT16_MAX__).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && defined(__FLT16_MAX__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(                                                                      \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512fp16,avx512bf16,avx2,f16c"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512fp16,avx512bf16,avx2,f16c")
#endif

#include "core/reduce_generic.h"

namespace tpcomm::kernels::detail {
namespace {

struct Avx512Fp16Isa {
  static constexpr size_t kVec = 64;
  static constexpr bool kStream = true;
  using F = Vec<float, 64>;
  template <class V>
  static void stream(char* p, V v) {
    static_assert(sizeof(V) == 64);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), reinterpret_cast<__m512i>(v));
  }
  static void fence() { _mm_sfence(); }
};

// Float16 stored and computed as binary16 lanes; the scalar tail uses the float32 route of
// HalfIo, which gives the same bits.
struct HalfNativeIo : HalfIo<Avx512Fp16Isa, false> {
  using V = Vec<_Float16, 64>;
  using U = Vec<uint16_t, 64>;
  static constexpr bool kPrefetch = true;
  static constexpr size_t kBlock = 32;
  static constexpr size_t kStoreBytes = 64;
  static V load(const char* p) { return load_vec<V>(p); }
  template <bool kNt>
  static void store(char* p, V v) {
    U u = reinterpret_cast<U>(v);
    u = v != v ? ((u & 0x8000) | 0x7e00) : u;  // NaN: sign|0x7e00, as Half(float)
    store_vec<Avx512Fp16Isa, U, kNt>(p, u);
  }
};

// BFloat16 narrowed by the AVX512-BF16 convert (round to nearest even, NaN kept and made
// quiet: the same bits as BFloat16(float)), except that it reads float32 subnormals as zero;
// a block holding one takes the integer rounding of BF16Io instead.
struct BF16HwIo : BF16Io<Avx512Fp16Isa> {
  template <bool kNt>
  static void store(char* p, V v) {
    constexpr int kDenormal = 0x20;  // vfpclassps category
    __mmask16 sub = static_cast<__mmask16>(_mm512_fpclass_ps_mask(v.even, kDenormal) |
                                           _mm512_fpclass_ps_mask(v.odd, kDenormal));
    if (__builtin_expect(sub != 0, 0)) return BF16Io<Avx512Fp16Isa>::store<kNt>(p, v);
    // Low 16 words: the even elements, high 16: the odd ones; interleave them back.
    __m512i packed = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(v.odd, v.even));
    const __m512i interleave =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    store_vec<Avx512Fp16Isa, U, kNt>(
        p, reinterpret_cast<U>(_mm512_permutexvar_epi16(interleave, packed)));
  }
};

constexpr KernelTable make_fp16_table() {
  using I = Avx512Fp16Isa;
  KernelTable t;
  BinaryFn* row = t.binary[dt_index(DType::Float16)];
  row[op_index(ReduceOp::SUM)] = &binary_kernel<I, HalfNativeIo, Add>;
  row[op_index(ReduceOp::AVG)] = &binary_kernel<I, HalfNativeIo, Add>;
  row[op_index(ReduceOp::PRODUCT)] = &binary_kernel<I, HalfNativeIo, Mul>;
  row[op_index(ReduceOp::MIN)] = &binary_kernel<I, HalfNativeIo, Min>;
  row[op_index(ReduceOp::MAX)] = &binary_kernel<I, HalfNativeIo, Max>;
  fill_floating<I, BF16HwIo>(t, DType::BFloat16);
  return t;
}

constexpr KernelTable kAvx512Fp16Table = make_fp16_table();

}  // namespace
}  // namespace tpcomm::kernels::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace tpcomm::kernels::detail {
const KernelTable* avx512fp16_table() { return &kAvx512Fp16Table; }
}  // namespace tpcomm::kernels::detail

#else  // no _Float16 or not x86-64

namespace tpcomm::kernels::detail {
const KernelTable* avx512fp16_table() { return nullptr; }
}  // namespace tpcomm::kernels::detail

#endif
