// Internal: the reduction kernels written once, instantiated per ISA path. Each of
// reduce_scalar.cc, reduce_avx2.cc and reduce_avx512.cc defines a tag type `Isa` in an
// anonymous namespace, switches the target (vector files), and includes this file; every
// template here is instantiated on that tag, so each path's code has internal linkage and
// can never be merged with another path's by the linker.
//
// Include this file only after <cstddef>, <cstdint>, <cstring>, <type_traits>,
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
template <class T>
inline constexpr bool kFloatLane = std::is_floating_point_v<typename LaneOf<T>::type>;

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

// Float16 bits computed as float32; scalar conversions are the Half struct's own.
template <class I, bool kHasVec = (I::kVec > 0)>
struct HalfIo {
  using S = uint16_t;
  using C = float;
  static constexpr size_t kBlock = 0;
  static C load1(const char* p) {
    uint16_t b;
    std::memcpy(&b, p, 2);
    return static_cast<float>(Half::from_bits(b));
  }
  static void store1(char* p, C v) {
    uint16_t b = Half(v).bits;
    std::memcpy(p, &b, 2);
  }
};
template <class I>
struct HalfIo<I, true> : HalfIo<I, false> {
  using V = typename I::F;
  using H = typename I::H;
  static constexpr size_t kBlock = I::kVec / 4;
  static constexpr size_t kStoreBytes = I::kVec / 2;
  static V load(const char* p) { return I::half_to_float(load_vec<H>(p)); }
  template <bool kNt>
  static void store(char* p, V v) {
    H h = I::float_to_half(v);
    // The hardware keeps NaN payload bits; Half(float) makes every NaN sign|0x7e00.
    H nan = reinterpret_cast<H>((h & 0x7fff) > 0x7c00);
    h = (h & ~nan) | (nan & ((h & 0x8000) | 0x7e00));
    store_vec<I, H, kNt>(p, h);
  }
};

// BFloat16 bits computed as float32, rounded to nearest even in integer arithmetic exactly as
// BFloat16(float) does (the bf16 convert instructions flush subnormals; this does not).
template <class I, bool kHasVec = (I::kVec > 0)>
struct BF16Io {
  using S = uint16_t;
  using C = float;
  static constexpr size_t kBlock = 0;
  static C load1(const char* p) {
    uint16_t b;
    std::memcpy(&b, p, 2);
    return static_cast<float>(BFloat16::from_bits(b));
  }
  static void store1(char* p, C v) {
    uint16_t b = BFloat16(v).bits;
    std::memcpy(p, &b, 2);
  }
};
template <class I>
struct BF16Io<I, true> : BF16Io<I, false> {
  using V = typename I::F;
  using H = typename I::H;
  using U = Vec<uint32_t, I::kVec>;
  static constexpr size_t kBlock = I::kVec / 4;
  static constexpr size_t kStoreBytes = I::kVec / 2;
  static V load(const char* p) {
    U w = __builtin_convertvector(load_vec<H>(p), U) << 16;
    return reinterpret_cast<V>(w);
  }
  template <bool kNt>
  static void store(char* p, V v) {
    U x = reinterpret_cast<U>(v);
    U nan = reinterpret_cast<U>((x & 0x7fffffffu) > 0x7f800000u);
    U rounded = (x + (0x7fffu + ((x >> 16) & 1u))) >> 16;
    U r = (rounded & ~nan) | (nan & ((x >> 16) | 0x40u));
    store_vec<I, H, kNt>(p, __builtin_convertvector(r, H));
  }
};

// ---- loops ------------------------------------------------------------------------------

template <class I, class P, bool kNt, class Op>
void binary_loop(char* d, const char* a, const char* b, size_t n, Op op) {
  constexpr size_t kS = sizeof(typename P::S);
  size_t i = 0;
  if constexpr (P::kBlock > 0) {
    constexpr size_t kB = P::kBlock;
    if constexpr (kNt) {  // scalar head up to the streaming alignment (d is kS-aligned)
      while (i < n && reinterpret_cast<uintptr_t>(d + i * kS) % P::kStoreBytes != 0) {
        P::store1(d + i * kS, op(P::load1(a + i * kS), P::load1(b + i * kS)));
        ++i;
      }
    }
    for (; i + 4 * kB <= n; i += 4 * kB) {
      const size_t o = i * kS;
      constexpr size_t kStep = kB * kS;
      auto r0 = op(P::load(a + o), P::load(b + o));
      auto r1 = op(P::load(a + o + kStep), P::load(b + o + kStep));
      auto r2 = op(P::load(a + o + 2 * kStep), P::load(b + o + 2 * kStep));
      auto r3 = op(P::load(a + o + 3 * kStep), P::load(b + o + 3 * kStep));
      P::template store<kNt>(d + o, r0);
      P::template store<kNt>(d + o + kStep, r1);
      P::template store<kNt>(d + o + 2 * kStep, r2);
      P::template store<kNt>(d + o + 3 * kStep, r3);
    }
    for (; i + kB <= n; i += kB) {
      P::template store<kNt>(d + i * kS, op(P::load(a + i * kS), P::load(b + i * kS)));
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
      auto r0 = op(P::load(a + o));
      auto r1 = op(P::load(a + o + kStep));
      P::template store<kNt>(d + o, r0);
      P::template store<kNt>(d + o + kStep, r1);
    }
    for (; i + kB <= n; i += kB) P::template store<kNt>(d + i * kS, op(P::load(a + i * kS)));
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
