// Internal: the reduction kernels written once, instantiated per ISA path. Each of
// reduce_scalar.cc, reduce_avx2.cc and reduce_avx512.cc defines a tag type `Isa` in an
// anonymous namespace, switches the target (vector files), and includes this file; every
// template here is instantiated on that tag, so each path's code has internal linkage and
// can never be merged with another path's by the linker.
//
// Include this file only after <cstddef>, <cstdint>, <cstring>, <type_traits>, <utility>,
// "tpcomm/types.hpp" and "core/reduce_table.h" (included again here for readers; they must
// already have been compiled for the baseline target before any target pragma).
//
// The tag provides:
//   kVec                    vector width in bytes (0: scalar only)
//   F, H                    float vector of kVec bytes; uint16 vector of kVec/2 bytes
//   half_to_float(H) -> F   exact conversion of binary16 bits
//   float_to_half(F) -> H   round to nearest even (NaN payload is fixed up here)
//   stream(p, v)            non-temporal store of a vector (p aligned to sizeof v)
//   fence()                 orders the non-temporal stores before later stores
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/reduce_table.h"
#include "tpcomm/types.hpp"

namespace tpcomm::kernels::detail {
namespace {

// A GCC/Clang vector of N bytes of T (N > 0).
template <class T, size_t N>
struct VecOf {
  typedef T type __attribute__((vector_size(N)));
};
template <class T, size_t N>
using Vec = typename VecOf<T, N>::type;

// Lane type of a vector, or the type itself for a scalar.
template <class T, bool kScalar = std::is_arithmetic_v<T>>
struct LaneOf {
  using type = T;
};
template <class T>
struct LaneOf<T, false> {
  using type = std::remove_cvref_t<decltype(std::declval<T&>()[0])>;
};
// Lanes are integers or floating point (including _Float16, which older standard libraries
// do not count as std::is_floating_point).
template <class T>
inline constexpr bool kFloatLane = !std::is_integral_v<typename LaneOf<T>::type>;

// Keeps the compiler from fusing a multiply with the add that follows (an FMA rounds once,
// the scalar path twice; all paths must agree bit for bit).
template <class T>
inline T opaque(T v) {
#if defined(__GNUC__) && defined(__x86_64__)
  asm("" : "+x"(v));
#elif defined(__GNUC__) && defined(__aarch64__)
  asm("" : "+w"(v));
#endif
  return v;
}

// Integer scalars combine in at least `unsigned` so that narrow types do not promote to int
// (where a product could overflow); vectors do not promote.
template <class T>
using Wide = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, T>;

// ---- element operations: the same source serves scalars and vectors --------------------
// Each op is built from the scale argument of the call (used by Premul, Mul, Div only).

template <class C>
struct Add {
  C s;
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      static_assert(std::is_unsigned_v<T>, "integer arithmetic runs on unsigned types");
      return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
    } else {
      return a + b;
    }
  }
};

template <class C>
struct Mul {
  C s;
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      static_assert(std::is_unsigned_v<T>, "integer arithmetic runs on unsigned types");
      return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
    } else {
      return a * b;
    }
  }
};

// Floating MIN/MAX: a NaN in either input gives NaN (a if a is NaN, else b); on ties
// (including +0/-0) b is returned, as x86 min/max instructions do.
template <class C>
struct Min {
  C s;
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (!kFloatLane<T>) {
      return a < b ? a : b;
    } else if constexpr (std::is_arithmetic_v<T>) {
      return (a < b || a != a) ? a : b;
    } else {
      return ((a < b) | (a != a)) ? a : b;
    }
  }
};

template <class C>
struct Max {
  C s;
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (!kFloatLane<T>) {
      return a > b ? a : b;
    } else if constexpr (std::is_arithmetic_v<T>) {
      return (a > b || a != a) ? a : b;
    } else {
      return ((a > b) | (a != a)) ? a : b;
    }
  }
};

template <class C>
struct And {
  C s;
  template <class T>
  T operator()(T a, T b) const {
    return static_cast<T>(a & b);
  }
};

template <class C>
struct Or {
  C s;
  template <class T>
  T operator()(T a, T b) const {
    return static_cast<T>(a | b);
  }
};

template <class C>
struct Xor {
  C s;
  template <class T>
  T operator()(T a, T b) const {
    return static_cast<T>(a ^ b);
  }
};

// PREMUL_SUM step: accumulator a plus scaled fresh input b, rounded after each operation.
template <class C>
struct Premul {
  C s;
  template <class T>
  T operator()(T a, T b) const {
    return a + opaque(b * s);
  }
};

template <class C>
struct MulBy {
  C s;
  template <class T>
  T operator()(T a) const {
    return a * s;
  }
};

template <class C>
struct DivBy {
  C s;
  template <class T>
  T operator()(T a) const {
    return a / s;
  }
};

// ---- storage policies: how elements are loaded into and stored from the compute type ----
// Scalar members (load1/store1) exist on every path; the vector members only when kVec > 0.

template <class C>
struct ScalarIo {
  static C load1(const char* p) {
    C v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store1(char* p, C v) { std::memcpy(p, &v, sizeof v); }
};

template <class I, class V, bool kNt>
inline void store_vec(char* p, V v) {
  if constexpr (kNt) {
    I::stream(p, v);
  } else {
    std::memcpy(p, &v, sizeof v);
  }
}

template <class V>
inline V load_vec(const char* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Elements stored as the compute type itself (integers as their unsigned or signed
// reinterpretation, float32, float64).
template <class I, class Cs, bool kHasVec = (I::kVec > 0)>
struct Direct : ScalarIo<Cs> {
  using S = Cs;
  using C = Cs;
  static constexpr size_t kBlock = 0;
};
template <class I, class Cs>
struct Direct<I, Cs, true> : ScalarIo<Cs> {
  using S = Cs;
  using C = Cs;
  using V = Vec<Cs, I::kVec>;
  static constexpr bool kPrefetch = false;
  static constexpr size_t kBlock = I::kVec / sizeof(Cs);
  static constexpr size_t kStoreBytes = I::kVec;
  static V load(const char* p) { return load_vec<V>(p); }
  template <bool kNt>
  static void store(char* p, V v) {
    store_vec<I, V, kNt>(p, v);
  }
};

// Bool: bytes read as truth values (non-zero = true), computed as 0/1.
template <class I, bool kHasVec = (I::kVec > 0)>
struct BoolIo {
  using S = uint8_t;
  using C = uint8_t;
  static constexpr size_t kBlock = 0;
  static C load1(const char* p) { return *reinterpret_cast<const unsigned char*>(p) != 0; }
  static void store1(char* p, C v) { *reinterpret_cast<unsigned char*>(p) = v; }
};
template <class I>
struct BoolIo<I, true> : BoolIo<I, false> {
  using V = Vec<uint8_t, I::kVec>;
  static constexpr bool kPrefetch = false;
  static constexpr size_t kBlock = I::kVec;
  static constexpr size_t kStoreBytes = I::kVec;
  static V load(const char* p) {
    V x = load_vec<V>(p);
    return reinterpret_cast<V>(x != 0) & 1;
  }
  template <bool kNt>
  static void store(char* p, V v) {
    store_vec<I, V, kNt>(p, v);
  }
};

// ---- 16-bit floats ---------------------------------------------------------------------
// Scalar conversions, inline (the scalar path and every tail use them). They are the
// algorithms of Half and BFloat16 in src/core/types.cc, bit for bit (the tests compare
// them); inline because an out-of-line call per element made the portable path 20x slower.

inline float f32_from_bits(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline uint32_t f32_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}

inline float half_to_f32(uint16_t h) {
  uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact
    return f32_from_bits(f32_bits(static_cast<float>(mant) * 0x1p-24f) | sign);
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  return f32_from_bits(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

inline uint16_t f32_to_half(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf, or NaN made quiet with no payload
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  }
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (absx < 0x38800000u) {  // subnormal half or zero: count 2^-24 units, ties to even
    float scaled = f32_from_bits(absx) * 16777216.0f;
    uint32_t m = static_cast<uint32_t>(scaled);
    float rem = scaled - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t h = (((absx >> 23) - 127 + 15) << 10) | ((absx & 0x7fffffu) >> 13);
  uint32_t rest = absx & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
  return static_cast<uint16_t>(sign | h);
}

inline float bf16_to_f32(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Float16 bits computed as float32.
template <class I, bool kHasVec = (I::kVec > 0)>
struct HalfIo {
  using S = uint16_t;
  using C = float;
  static constexpr size_t kBlock = 0;
  static C load1(const char* p) {
    uint16_t b;
    std::memcpy(&b, p, 2);
    return half_to_f32(b);
  }
  static void store1(char* p, C v) {
    uint16_t b = f32_to_half(v);
    std::memcpy(p, &b, 2);
  }
};
template <class I>
struct HalfIo<I, true> : HalfIo<I, false> {
  using V = typename I::F;
  using H = typename I::H;
  static constexpr bool kPrefetch = true;
  static constexpr size_t kBlock = I::kVec / 4;
  static constexpr size_t kStoreBytes = I::kVec / 2;
  static V load(const char* p) { return I::half_to_float(load_vec<H>(p)); }
  template <bool kNt>
  static void store(char* p, V v) {
    // The hardware keeps NaN payload bits, Half(float) makes every NaN sign|0x7e00: a NaN
    // becomes the quiet NaN without payload first, which converts to exactly that.
    using U = Vec<uint32_t, I::kVec>;
    U x = reinterpret_cast<U>(v);
    x = v != v ? ((x & 0x80000000u) | 0x7fc00000u) : x;
    store_vec<I, H, kNt>(p, I::float_to_half(reinterpret_cast<V>(x)));
  }
};

// Two float vectors: the even and the odd elements of one vector of 16-bit values.
template <class V>
struct EvenOdd {
  V even, odd;
};

// BFloat16 bits computed as float32. A vector of bf16 is split into its even elements (shifted
// up) and its odd elements (masked): each is then a float vector, with no shuffle. Results
// are rounded to nearest even in integer arithmetic exactly as BFloat16(float) does (the
// bf16 convert instructions flush subnormals; this does not) and merged back.
template <class I, bool kHasVec = (I::kVec > 0)>
struct BF16Io {
  using S = uint16_t;
  using C = float;
  static constexpr size_t kBlock = 0;
  static C load1(const char* p) {
    uint16_t b;
    std::memcpy(&b, p, 2);
    return bf16_to_f32(b);
  }
  static void store1(char* p, C v) {
    uint16_t b = f32_to_bf16(v);
    std::memcpy(p, &b, 2);
  }
};
template <class I>
struct BF16Io<I, true> : BF16Io<I, false> {
  using F = typename I::F;
  using U = Vec<uint32_t, I::kVec>;
  using V = EvenOdd<F>;
  static constexpr bool kPrefetch = true;
  static constexpr size_t kBlock = I::kVec / 2;
  static constexpr size_t kStoreBytes = I::kVec;
  static V load(const char* p) {
    U x = load_vec<U>(p);
    return {reinterpret_cast<F>(x << 16), reinterpret_cast<F>(x & 0xffff0000u)};
  }
  // The rounded bf16 in the upper half of each 32-bit lane.
  static U round(F f) {
    U x = reinterpret_cast<U>(f);
    U r = x + 0x7fffu + ((x >> 16) & 1u);
    return f != f ? (x | 0x00400000u) : r;  // NaN: keep it, quiet
  }
  template <bool kNt>
  static void store(char* p, V v) {
    U merged = (round(v.even) >> 16) | (round(v.odd) & 0xffff0000u);
    store_vec<I, U, kNt>(p, merged);
  }
};

// ---- loops ------------------------------------------------------------------------------

// Software prefetch for the 16-bit float policies, whose conversions cost enough compute per
// byte that the hardware prefetcher alone leaves DRAM idle between loads (measured: about
// +20% out of cache). Only for calls large enough to leave the caches; the float32 and
// integer loops do not need it (and lose in-cache speed with it).
inline constexpr size_t kPrefetchDistance = 2048;  // bytes ahead; 1K-4K measured alike
inline constexpr size_t kPrefetchMinBytes = 256 << 10;

// op on a compute vector, or on each half of an EvenOdd pair.
template <class Op, class V>
inline V apply(const Op& op, V x, V y) {
  return op(x, y);
}
template <class Op, class V>
inline EvenOdd<V> apply(const Op& op, EvenOdd<V> x, EvenOdd<V> y) {
  return {op(x.even, y.even), op(x.odd, y.odd)};
}
template <class Op, class V>
inline V apply(const Op& op, V x) {
  return op(x);
}
template <class Op, class V>
inline EvenOdd<V> apply(const Op& op, EvenOdd<V> x) {
  return {op(x.even), op(x.odd)};
}

template <class I, class P, bool kNt, class Op>
void binary_loop(char* d, const char* a, const char* b, size_t n, Op op) {
  constexpr size_t kS = sizeof(typename P::S);
  size_t i = 0;
  if constexpr (P::kBlock > 0) {
    constexpr size_t kB = P::kBlock;
    [[maybe_unused]] const bool prefetch = n * kS >= kPrefetchMinBytes;
    if constexpr (kNt) {  // scalar head up to the streaming alignment (d is kS-aligned)
      while (i < n && reinterpret_cast<uintptr_t>(d + i * kS) % P::kStoreBytes != 0) {
        P::store1(d + i * kS, op(P::load1(a + i * kS), P::load1(b + i * kS)));
        ++i;
      }
    }
    for (; i + 4 * kB <= n; i += 4 * kB) {
      const size_t o = i * kS;
      constexpr size_t kStep = kB * kS;
      if constexpr (P::kPrefetch) {
        if (prefetch) {
          for (size_t line = 0; line < 4 * kStep; line += 64) {
            __builtin_prefetch(a + o + kPrefetchDistance + line);
            __builtin_prefetch(b + o + kPrefetchDistance + line);
          }
        }
      }
      auto r0 = apply(op, P::load(a + o), P::load(b + o));
      auto r1 = apply(op, P::load(a + o + kStep), P::load(b + o + kStep));
      auto r2 = apply(op, P::load(a + o + 2 * kStep), P::load(b + o + 2 * kStep));
      auto r3 = apply(op, P::load(a + o + 3 * kStep), P::load(b + o + 3 * kStep));
      P::template store<kNt>(d + o, r0);
      P::template store<kNt>(d + o + kStep, r1);
      P::template store<kNt>(d + o + 2 * kStep, r2);
      P::template store<kNt>(d + o + 3 * kStep, r3);
    }
    for (; i + kB <= n; i += kB) {
      P::template store<kNt>(d + i * kS, apply(op, P::load(a + i * kS), P::load(b + i * kS)));
    }
    if constexpr (kNt) I::fence();
  }
  for (; i < n; ++i) P::store1(d + i * kS, op(P::load1(a + i * kS), P::load1(b + i * kS)));
}

template <class I, class P, bool kNt, class Op>
void unary_loop(char* d, const char* a, size_t n, Op op) {
  constexpr size_t kS = sizeof(typename P::S);
  size_t i = 0;
  if constexpr (P::kBlock > 0) {
    constexpr size_t kB = P::kBlock;
    if constexpr (kNt) {
      while (i < n && reinterpret_cast<uintptr_t>(d + i * kS) % P::kStoreBytes != 0) {
        P::store1(d + i * kS, op(P::load1(a + i * kS)));
        ++i;
      }
    }
    for (; i + 2 * kB <= n; i += 2 * kB) {
      const size_t o = i * kS;
      constexpr size_t kStep = kB * kS;
      auto r0 = apply(op, P::load(a + o));
      auto r1 = apply(op, P::load(a + o + kStep));
      P::template store<kNt>(d + o, r0);
      P::template store<kNt>(d + o + kStep, r1);
    }
    for (; i + kB <= n; i += kB) P::template store<kNt>(d + i * kS, apply(op, P::load(a + i * kS)));
    if constexpr (kNt) I::fence();
  }
  for (; i < n; ++i) P::store1(d + i * kS, op(P::load1(a + i * kS)));
}

// Streaming stores need whole elements up to the vector alignment: the output must at least
// be aligned to its element size.
template <class I, class P>
inline bool can_stream(const void* d) {
  if constexpr (P::kBlock > 0 && I::kStream) {
    return reinterpret_cast<uintptr_t>(d) % sizeof(typename P::S) == 0;
  } else {
    return false;
  }
}

template <class I, class P, template <class> class Op>
void binary_kernel(void* d, const void* a, const void* b, size_t n, double s, bool nt) {
  using C = typename P::C;
  const Op<C> op{static_cast<C>(s)};
  auto* dc = static_cast<char*>(d);
  auto* ac = static_cast<const char*>(a);
  auto* bc = static_cast<const char*>(b);
  if constexpr (P::kBlock > 0 && I::kStream) {
    if (nt && can_stream<I, P>(d)) return binary_loop<I, P, true>(dc, ac, bc, n, op);
  }
  binary_loop<I, P, false>(dc, ac, bc, n, op);
}

template <class I, class P, template <class> class Op>
void unary_kernel(void* d, const void* a, size_t n, double s, bool nt) {
  using C = typename P::C;
  const Op<C> op{static_cast<C>(s)};
  auto* dc = static_cast<char*>(d);
  auto* ac = static_cast<const char*>(a);
  if constexpr (P::kBlock > 0 && I::kStream) {
    if (nt && can_stream<I, P>(d)) return unary_loop<I, P, true>(dc, ac, n, op);
  }
  unary_loop<I, P, false>(dc, ac, n, op);
}

// ---- the table ----------------------------------------------------------------------------

constexpr int op_index(ReduceOp op) { return static_cast<int>(op); }
constexpr int dt_index(DType t) { return static_cast<int>(t); }

// Floating types: arithmetic, MIN/MAX, AVG as SUM, PREMUL_SUM, scale and divide.
template <class I, class P>
constexpr void fill_floating(KernelTable& t, DType dt) {
  BinaryFn* row = t.binary[dt_index(dt)];
  row[op_index(ReduceOp::SUM)] = &binary_kernel<I, P, Add>;
  row[op_index(ReduceOp::AVG)] = &binary_kernel<I, P, Add>;
  row[op_index(ReduceOp::PRODUCT)] = &binary_kernel<I, P, Mul>;
  row[op_index(ReduceOp::MIN)] = &binary_kernel<I, P, Min>;
  row[op_index(ReduceOp::MAX)] = &binary_kernel<I, P, Max>;
  row[op_index(ReduceOp::PREMUL_SUM)] = &binary_kernel<I, P, Premul>;
  t.mul[dt_index(dt)] = &unary_kernel<I, P, MulBy>;
  t.div[dt_index(dt)] = &unary_kernel<I, P, DivBy>;
}

// Integers: wrapping SUM/PRODUCT and bitwise ops on the unsigned view U, MIN/MAX on the
// view M (signed, or unsigned for UInt8).
template <class I, class U, class M>
constexpr void fill_integer(KernelTable& t, DType dt) {
  BinaryFn* row = t.binary[dt_index(dt)];
  row[op_index(ReduceOp::SUM)] = &binary_kernel<I, Direct<I, U>, Add>;
  row[op_index(ReduceOp::PRODUCT)] = &binary_kernel<I, Direct<I, U>, Mul>;
  row[op_index(ReduceOp::MIN)] = &binary_kernel<I, Direct<I, M>, Min>;
  row[op_index(ReduceOp::MAX)] = &binary_kernel<I, Direct<I, M>, Max>;
  row[op_index(ReduceOp::BAND)] = &binary_kernel<I, Direct<I, U>, And>;
  row[op_index(ReduceOp::BOR)] = &binary_kernel<I, Direct<I, U>, Or>;
  row[op_index(ReduceOp::BXOR)] = &binary_kernel<I, Direct<I, U>, Xor>;
}

template <class I>
constexpr KernelTable make_table() {
  KernelTable t;
  BinaryFn* b = t.binary[dt_index(DType::Bool)];
  b[op_index(ReduceOp::SUM)] = &binary_kernel<I, BoolIo<I>, Or>;
  b[op_index(ReduceOp::MAX)] = &binary_kernel<I, BoolIo<I>, Or>;
  b[op_index(ReduceOp::BOR)] = &binary_kernel<I, BoolIo<I>, Or>;
  b[op_index(ReduceOp::PRODUCT)] = &binary_kernel<I, BoolIo<I>, And>;
  b[op_index(ReduceOp::MIN)] = &binary_kernel<I, BoolIo<I>, And>;
  b[op_index(ReduceOp::BAND)] = &binary_kernel<I, BoolIo<I>, And>;
  b[op_index(ReduceOp::BXOR)] = &binary_kernel<I, BoolIo<I>, Xor>;
  fill_integer<I, uint8_t, uint8_t>(t, DType::UInt8);
  fill_integer<I, uint8_t, int8_t>(t, DType::Int8);
  fill_integer<I, uint16_t, int16_t>(t, DType::Int16);
  fill_integer<I, uint32_t, int32_t>(t, DType::Int32);
  fill_integer<I, uint64_t, int64_t>(t, DType::Int64);
  fill_floating<I, HalfIo<I>>(t, DType::Float16);
  fill_floating<I, BF16Io<I>>(t, DType::BFloat16);
  fill_floating<I, Direct<I, float>>(t, DType::Float32);
  fill_floating<I, Direct<I, double>>(t, DType::Float64);
  return t;
}

}  // namespace
}  // namespace tpcomm::kernels::detail
