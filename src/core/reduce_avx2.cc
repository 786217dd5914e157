// The AVX2 path of the reduction kernels (32-byte vectors, F16C half conversions). Compiled
// for that target function by function, so the library itself needs no -march flag; reduce.cc
// calls into it only when the CPU has AVX2 and F16C.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/reduce_table.h"
#include "tpcomm/types.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

// Everything below is compiled for AVX2 + F16C; all of it has internal linkage (see
// reduce_generic.h), so no baseline caller can pick up one of these functions by accident.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#endif

#include "core/reduce_generic.h"

namespace tpcomm::kernels::detail {
namespace {

struct Avx2Isa {
  static constexpr size_t kVec = 32;
  static constexpr bool kStream = true;
  using F = Vec<float, 32>;
  using H = Vec<uint16_t, 16>;
  static F half_to_float(H h) {
    return reinterpret_cast<F>(_mm256_cvtph_ps(reinterpret_cast<__m128i>(h)));
  }
  static H float_to_half(F f) {
    return reinterpret_cast<H>(_mm256_cvtps_ph(reinterpret_cast<__m256>(f),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  template <class V>
  static void stream(char* p, V v) {
    if constexpr (sizeof(V) == 32) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<__m256i>(v));
    } else {
      static_assert(sizeof(V) == 16);
      _mm_stream_si128(reinterpret_cast<__m128i*>(p), reinterpret_cast<__m128i>(v));
    }
  }
  static void fence() { _mm_sfence(); }
};

constexpr KernelTable kAvx2Table = make_table<Avx2Isa>();

}  // namespace
}  // namespace tpcomm::kernels::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace tpcomm::kernels::detail {
const KernelTable* avx2_table() { return &kAvx2Table; }
}  // namespace tpcomm::kernels::detail

#else  // not x86-64

namespace tpcomm::kernels::detail {
const KernelTable* avx2_table() { return nullptr; }
}  // namespace tpcomm::kernels::detail

#endif
