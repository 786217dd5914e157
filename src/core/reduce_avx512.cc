// The AVX-512 path of the reduction kernels (64-byte vectors: F, BW, VL, DQ). Compiled
// for that target function by function, so the library itself needs no -march flag; reduce.cc
// calls into it only when the CPU has AVX-512 F, BW, VL and DQ.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/reduce_table.h"
#include "tpcomm/types.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

// Everything below is compiled for AVX-512; all of it has internal linkage (see
// reduce_generic.h), so no baseline caller can pick up one of these functions by accident.
#if defined(__clang__)
#pragma clang attribute push( \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c")
#endif

#include "core/reduce_generic.h"

namespace tpcomm::kernels::detail {
namespace {

struct Avx512Isa {
  static constexpr size_t kVec = 64;
  static constexpr bool kStream = true;
  using F = Vec<float, 64>;
  using H = Vec<uint16_t, 32>;
  // The masked forms avoid GCC 12's false maybe-uninitialized warning on _mm512_undefined_*.
  static F half_to_float(H h) {
    return reinterpret_cast<F>(_mm512_maskz_cvtph_ps(0xffff, reinterpret_cast<__m256i>(h)));
  }
  static H float_to_half(F f) {
    return reinterpret_cast<H>(_mm512_maskz_cvtps_ph(
        0xffff, reinterpret_cast<__m512>(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  template <class V>
  static void stream(char* p, V v) {
    if constexpr (sizeof(V) == 64) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(p), reinterpret_cast<__m512i>(v));
    } else {
      static_assert(sizeof(V) == 32);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<__m256i>(v));
    }
  }
  static void fence() { _mm_sfence(); }
};

constexpr KernelTable kAvx512Table = make_table<Avx512Isa>();

}  // namespace
}  // namespace tpcomm::kernels::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace tpcomm::kernels::detail {
const KernelTable* avx512_table() { return &kAvx512Table; }
}  // namespace tpcomm::kernels::detail

#else  // not x86-64

namespace tpcomm::kernels::detail {
const KernelTable* avx512_table() { return nullptr; }
}  // namespace tpcomm::kernels::detail

#endif
