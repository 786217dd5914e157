// The element arithmetic of the GPU reduction kernels, written once for host and device
// (__host__ __device__ under nvcc, plain inline functions otherwise): reduce_kernels.cu runs
// it on the GPU, the fake driver's twins run it on the host, and tests/cuda/reduce_device_test
// compares it with the host kernels of core/reduce.h, bit for bit, for every op and dtype.
//
// The semantics are those of core/reduce.h: integers wrap (computed on the unsigned view),
// MIN/MAX on the signed view; float16 and bfloat16 widen to float32 and round back to nearest
// even exactly as tpcomm::Half and tpcomm::BFloat16 do; one rounding per operation (the .cu is
// compiled without fused multiply-add); floating MIN/MAX return a when a is NaN, else b on ties
// (as the host's); bool ops act on truth values and store 0 or 1.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TPCOMM_HD __host__ __device__ __forceinline__
#else
#define TPCOMM_HD inline
#include <cstring>
#endif

namespace tpcomm::cuda::dev {

TPCOMM_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
#endif
}

TPCOMM_HD float f32_from_bits(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(x);
#else
  float f;
  std::memcpy(&f, &x, 4);
  return f;
#endif
}

/// float32 -> float16 bits, round to nearest even (tpcomm::Half's rounding).
TPCOMM_HD uint16_t half_from_float(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u)  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow
  if (absx < 0x38800000u) {  // subnormal half (or zero): count 2^-24 units, nearest even
    const float scaled = f32_from_bits(absx) * 16777216.0f;
    uint32_t m = static_cast<uint32_t>(scaled);
    const float rem = scaled - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return static_cast<uint16_t>(sign | m);
  }
  const uint32_t mant = absx & 0x7fffffu;
  const uint32_t exp = (absx >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent
  return static_cast<uint16_t>(sign | h);
}

/// float16 bits -> float32 (exact).
TPCOMM_HD float half_to_float(uint16_t bits) {
  const uint32_t sign = (static_cast<uint32_t>(bits) & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  const uint32_t mant = bits & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return f32_from_bits(sign);
    return f32_from_bits(f32_bits(static_cast<float>(mant) / 16777216.0f) | sign);
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  return f32_from_bits(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

/// float32 -> bfloat16 bits, round to nearest even; NaN stays quiet (tpcomm::BFloat16's).
TPCOMM_HD uint16_t bf16_from_float(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

TPCOMM_HD float bf16_to_float(uint16_t bits) {
  return f32_from_bits(static_cast<uint32_t>(bits) << 16);
}

// ---- storage traits: S is stored, Arith combines SUM/PRODUCT/bitwise, Order MIN/MAX ----

template <class S_, class U, class M>
struct IntTraits {
  using S = S_;
  using Arith = U;
  using Order = M;
  using Scale = double;  // unused: scaling is for floating types
  TPCOMM_HD static U arith(S v) { return static_cast<U>(v); }
  TPCOMM_HD static M order(S v) { return static_cast<M>(v); }
  TPCOMM_HD static S store(U v) { return static_cast<S>(v); }
  TPCOMM_HD static S store_order(M v) { return static_cast<S>(v); }
};

struct BoolTraits {
  using S = uint8_t;
  using Arith = uint8_t;
  using Order = uint8_t;
  using Scale = double;
  TPCOMM_HD static uint8_t arith(S v) { return v != 0 ? 1 : 0; }
  TPCOMM_HD static uint8_t order(S v) { return v != 0 ? 1 : 0; }
  TPCOMM_HD static S store(uint8_t v) { return v; }
  TPCOMM_HD static S store_order(uint8_t v) { return v; }
};

template <class T>
struct PlainFloatTraits {
  using S = T;
  using Arith = T;
  using Order = T;
  using Scale = T;
  TPCOMM_HD static T arith(S v) { return v; }
  TPCOMM_HD static T order(S v) { return v; }
  TPCOMM_HD static S store(T v) { return v; }
  TPCOMM_HD static S store_order(T v) { return v; }
};

struct HalfTraits {
  using S = uint16_t;
  using Arith = float;
  using Order = float;
  using Scale = float;
  TPCOMM_HD static float arith(S v) { return half_to_float(v); }
  TPCOMM_HD static float order(S v) { return half_to_float(v); }
  TPCOMM_HD static S store(float v) { return half_from_float(v); }
  TPCOMM_HD static S store_order(float v) { return half_from_float(v); }
};

struct BF16Traits {
  using S = uint16_t;
  using Arith = float;
  using Order = float;
  using Scale = float;
  TPCOMM_HD static float arith(S v) { return bf16_to_float(v); }
  TPCOMM_HD static float order(S v) { return bf16_to_float(v); }
  TPCOMM_HD static S store(float v) { return bf16_from_float(v); }
  TPCOMM_HD static S store_order(float v) { return bf16_from_float(v); }
};

using BoolTr = BoolTraits;
using U8Tr = IntTraits<uint8_t, uint8_t, uint8_t>;
using I8Tr = IntTraits<int8_t, uint8_t, int8_t>;
using I16Tr = IntTraits<int16_t, uint16_t, int16_t>;
using I32Tr = IntTraits<int32_t, uint32_t, int32_t>;
using I64Tr = IntTraits<int64_t, uint64_t, int64_t>;
using F16Tr = HalfTraits;
using BF16Tr = BF16Traits;
using F32Tr = PlainFloatTraits<float>;
using F64Tr = PlainFloatTraits<double>;

// ---- binary ops: out = op(a, b) ----
// Integers narrower than unsigned combine in unsigned (no promotion to int, where a product
// could overflow).

template <class T>
TPCOMM_HD T wide_add(T a, T b) {
  if constexpr (sizeof(T) < sizeof(unsigned))
    return static_cast<T>(static_cast<unsigned>(a) + static_cast<unsigned>(b));
  else
    return a + b;
}

template <class T>
TPCOMM_HD T wide_mul(T a, T b) {
  if constexpr (sizeof(T) < sizeof(unsigned))
    return static_cast<T>(static_cast<unsigned>(a) * static_cast<unsigned>(b));
  else
    return a * b;
}

template <class Tr>
struct Add {
  typename Tr::Scale s;
  TPCOMM_HD typename Tr::S operator()(typename Tr::S a, typename Tr::S b) const {
    return Tr::store(wide_add(Tr::arith(a), Tr::arith(b)));
  }
};

template <class Tr>
struct Mul {
  typename Tr::Scale s;
  TPCOMM_HD typename Tr::S operator()(typename Tr::S a, typename Tr::S b) const {
    return Tr::store(wide_mul(Tr::arith(a), Tr::arith(b)));
  }
};

template <class Tr>
struct Min {
  typename Tr::Scale s;
  TPCOMM_HD typename Tr::S operator()(typename Tr::S a, typename Tr::S b) const {
    const auto x = Tr::order(a), y = Tr::order(b);
    return Tr::store_order((x < y || x != x) ? x : y);
  }
};

template <class Tr>
struct Max {
  typename Tr::Scale s;
  TPCOMM_HD typename Tr::S operator()(typename Tr::S a, typename Tr::S b) const {
    const auto x = Tr::order(a), y = Tr::order(b);
    return Tr::store_order((x > y || x != x) ? x : y);
  }
};

template <class Tr>
struct And {
  typename Tr::Scale s;
  TPCOMM_HD typename Tr::S operator()(typename Tr::S a, typename Tr::S b) const {
    return Tr::store(static_cast<typename Tr::Arith>(Tr::arith(a) & Tr::arith(b)));
  }
};

template <class Tr>
struct Or {
  typename Tr::Scale s;
  TPCOMM_HD typename Tr::S operator()(typename Tr::S a, typename Tr::S b) const {
    return Tr::store(static_cast<typename Tr::Arith>(Tr::arith(a) | Tr::arith(b)));
  }
};

template <class Tr>
struct Xor {
  typename Tr::Scale s;
  TPCOMM_HD typename Tr::S operator()(typename Tr::S a, typename Tr::S b) const {
    return Tr::store(static_cast<typename Tr::Arith>(Tr::arith(a) ^ Tr::arith(b)));
  }
};

/// PREMUL_SUM step: accumulator a plus s * b, each operation rounded in the compute type.
template <class Tr>
struct Premul {
  typename Tr::Scale s;
  TPCOMM_HD typename Tr::S operator()(typename Tr::S a, typename Tr::S b) const {
    const typename Tr::Arith scaled = Tr::arith(b) * s;
    return Tr::store(Tr::arith(a) + scaled);
  }
};

// ---- unary ops: out = op(a) (floating types) ----

template <class Tr>
struct MulBy {
  typename Tr::Scale s;
  TPCOMM_HD typename Tr::S operator()(typename Tr::S a) const {
    return Tr::store(Tr::arith(a) * s);
  }
};

template <class Tr>
struct DivBy {
  typename Tr::Scale s;
  TPCOMM_HD typename Tr::S operator()(typename Tr::S a) const {
    return Tr::store(Tr::arith(a) / s);
  }
};

// ---- kernel bodies: thread `first` of `step` threads handles elements first, first+step ...

template <class Tr, template <class> class Op>
TPCOMM_HD void binary_body(uint64_t first, uint64_t step, void* dst, const void* a, const void* b,
                           uint64_t n, double scale) {
  const Op<Tr> op{static_cast<typename Tr::Scale>(scale)};
  auto* d = static_cast<typename Tr::S*>(dst);
  const auto* x = static_cast<const typename Tr::S*>(a);
  const auto* y = static_cast<const typename Tr::S*>(b);
  for (uint64_t i = first; i < n; i += step) d[i] = op(x[i], y[i]);
}

template <class Tr, template <class> class Op>
TPCOMM_HD void unary_body(uint64_t first, uint64_t step, void* dst, const void* src, uint64_t n,
                          double scale) {
  const Op<Tr> op{static_cast<typename Tr::Scale>(scale)};
  auto* d = static_cast<typename Tr::S*>(dst);
  const auto* x = static_cast<const typename Tr::S*>(src);
  for (uint64_t i = first; i < n; i += step) d[i] = op(x[i]);
}

}  // namespace tpcomm::cuda::dev

// ---- the kernels: X(op, dtype, Traits, Op) ----
// Binary kernels tpcomm_<op>_<dtype>(void* dst, const void* a, const void* b,
// unsigned long long n, double scale); unary ones tpcomm_<op>_<dtype>(void* dst,
// const void* src, unsigned long long n, double scale). Names follow reduce_op_name() and
// dtype_name() of tpcomm/types.hpp; AVG runs sum and then div (by the group size).
// clang-format off
#define TPCOMM_CUDA_INT_OPS(X, dt, Tr)                                                           \
  X(sum, dt, Tr, Add) X(prod, dt, Tr, Mul) X(min, dt, Tr, Min) X(max, dt, Tr, Max)               \
  X(band, dt, Tr, And) X(bor, dt, Tr, Or) X(bxor, dt, Tr, Xor)
// clang-format on
// clang-format off
#define TPCOMM_CUDA_FLOAT_OPS(X, dt, Tr)                                                         \
  X(sum, dt, Tr, Add) X(prod, dt, Tr, Mul) X(min, dt, Tr, Min) X(max, dt, Tr, Max)               \
  X(premul_sum, dt, Tr, Premul)
// clang-format on
// clang-format off
#define TPCOMM_CUDA_BINARY_KERNELS(X)                                                            \
  X(sum, bool, BoolTr, Or) X(prod, bool, BoolTr, And) X(min, bool, BoolTr, And)                  \
  X(max, bool, BoolTr, Or) X(band, bool, BoolTr, And) X(bor, bool, BoolTr, Or)                   \
  X(bxor, bool, BoolTr, Xor)                                                                     \
  TPCOMM_CUDA_INT_OPS(X, uint8, U8Tr) TPCOMM_CUDA_INT_OPS(X, int8, I8Tr)                         \
  TPCOMM_CUDA_INT_OPS(X, int16, I16Tr) TPCOMM_CUDA_INT_OPS(X, int32, I32Tr)                      \
  TPCOMM_CUDA_INT_OPS(X, int64, I64Tr)                                                           \
  TPCOMM_CUDA_FLOAT_OPS(X, float16, F16Tr) TPCOMM_CUDA_FLOAT_OPS(X, bfloat16, BF16Tr)            \
  TPCOMM_CUDA_FLOAT_OPS(X, float32, F32Tr) TPCOMM_CUDA_FLOAT_OPS(X, float64, F64Tr)
// clang-format on
// clang-format off
#define TPCOMM_CUDA_UNARY_KERNELS(X)                                                             \
  X(scale, float16, F16Tr, MulBy) X(div, float16, F16Tr, DivBy)                                  \
  X(scale, bfloat16, BF16Tr, MulBy) X(div, bfloat16, BF16Tr, DivBy)                              \
  X(scale, float32, F32Tr, MulBy) X(div, float32, F32Tr, DivBy)                                  \
  X(scale, float64, F64Tr, MulBy) X(div, float64, F64Tr, DivBy)
// clang-format on
