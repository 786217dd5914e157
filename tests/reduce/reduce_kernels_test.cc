// Reduction kernels: every dtype x op x ISA path against an independent element-wise
// reference (integers exactly, float32/float64 exactly, float16/bfloat16 bit for bit against
// the Half/BFloat16 conversions), over sizes that hit every tail, unaligned and aliased
// buffers, streaming stores; plus NaN propagation, the finishing helpers, the ISA selection
// variable and every error path.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/reduce.h"
#include "tpcomm/error.hpp"
#include "tpcomm/types.hpp"

namespace tpcomm::kernels {
namespace {

constexpr ReduceOp kAllOps[] = {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN,
                                ReduceOp::MAX, ReduceOp::AVG,     ReduceOp::BAND,
                                ReduceOp::BOR, ReduceOp::BXOR,    ReduceOp::PREMUL_SUM};
constexpr size_t kSizes[] = {0, 1, 7, 15, 16, 17, 31, 33, 1000, 4099};
constexpr size_t kNever = std::numeric_limits<size_t>::max();

// ---- an independent element-wise reference ------------------------------------------------

template <class T>
T get(const uint8_t* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}
template <class T>
void put(uint8_t* p, size_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

// Reads element i of an integer tensor as (signed value, raw bits).
int64_t int_value(DType t, const uint8_t* p, size_t i) {
  switch (t) {
    case DType::UInt8:
      return get<uint8_t>(p, i);
    case DType::Int8:
      return get<int8_t>(p, i);
    case DType::Int16:
      return get<int16_t>(p, i);
    case DType::Int32:
      return get<int32_t>(p, i);
    default:
      return get<int64_t>(p, i);
  }
}

void put_int_bits(DType t, uint8_t* p, size_t i, uint64_t bits) {
  switch (t) {
    case DType::UInt8:
    case DType::Int8:
      put<uint8_t>(p, i, static_cast<uint8_t>(bits));
      break;
    case DType::Int16:
      put<uint16_t>(p, i, static_cast<uint16_t>(bits));
      break;
    case DType::Int32:
      put<uint32_t>(p, i, static_cast<uint32_t>(bits));
      break;
    default:
      put<uint64_t>(p, i, bits);
      break;
  }
}

// Floating MIN/MAX as documented: NaN wins (a first), ties return b.
template <class F>
F ref_min(F a, F b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  return a < b ? a : b;
}
template <class F>
F ref_max(F a, F b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  return a > b ? a : b;
}

// One float32 operation, computed in float64 and rounded once (exact for +, *, and a
// correctly rounded result for the two-step premultiplied sum).
float ref_f32(ReduceOp op, float a, float b, double scale) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG:
      return static_cast<float>(double{a} + double{b});
    case ReduceOp::PRODUCT:
      return static_cast<float>(double{a} * double{b});
    case ReduceOp::MIN:
      return ref_min(a, b);
    case ReduceOp::MAX:
      return ref_max(a, b);
    case ReduceOp::PREMUL_SUM: {
      volatile float t = static_cast<float>(double{static_cast<float>(scale)} * double{b});
      return static_cast<float>(double{a} + double{t});
    }
    default:
      ADD_FAILURE() << "no float op " << reduce_op_name(op);
      return 0;
  }
}

double ref_f64(ReduceOp op, double a, double b, double scale) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG:
      return a + b;
    case ReduceOp::PRODUCT:
      return a * b;
    case ReduceOp::MIN:
      return ref_min(a, b);
    case ReduceOp::MAX:
      return ref_max(a, b);
    case ReduceOp::PREMUL_SUM: {
      volatile double t = scale * b;
      return a + t;
    }
    default:
      ADD_FAILURE() << "no float op " << reduce_op_name(op);
      return 0;
  }
}

uint64_t ref_int(DType t, ReduceOp op, int64_t a, int64_t b) {
  uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (op) {
    case ReduceOp::SUM:
      return ua + ub;  // truncated to the width by put_int_bits
    case ReduceOp::PRODUCT:
      return ua * ub;
    case ReduceOp::MIN:
      return static_cast<uint64_t>(a < b ? a : b);
    case ReduceOp::MAX:
      return static_cast<uint64_t>(a > b ? a : b);
    case ReduceOp::BAND:
      return ua & ub;
    case ReduceOp::BOR:
      return ua | ub;
    case ReduceOp::BXOR:
      return ua ^ ub;
    default:
      ADD_FAILURE() << "no int op " << reduce_op_name(op);
      return 0;
  }
}

uint8_t ref_bool(ReduceOp op, uint8_t a, uint8_t b) {
  bool x = a != 0, y = b != 0;
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::MAX:
    case ReduceOp::BOR:
      return x || y;
    case ReduceOp::PRODUCT:
    case ReduceOp::MIN:
    case ReduceOp::BAND:
      return x && y;
    case ReduceOp::BXOR:
      return x != y;
    default:
      ADD_FAILURE() << "no bool op " << reduce_op_name(op);
      return 0;
  }
}

// out[i] = reference op(a[i], b[i]).
void reference(DType t, ReduceOp op, const uint8_t* a, const uint8_t* b, uint8_t* out, size_t n,
               double scale) {
  for (size_t i = 0; i < n; ++i) {
    switch (t) {
      case DType::Bool:
        put<uint8_t>(out, i, ref_bool(op, a[i], b[i]));
        break;
      case DType::Float16: {
        float x = static_cast<float>(Half::from_bits(get<uint16_t>(a, i)));
        float y = static_cast<float>(Half::from_bits(get<uint16_t>(b, i)));
        put<uint16_t>(out, i, Half(ref_f32(op, x, y, scale)).bits);
        break;
      }
      case DType::BFloat16: {
        float x = static_cast<float>(BFloat16::from_bits(get<uint16_t>(a, i)));
        float y = static_cast<float>(BFloat16::from_bits(get<uint16_t>(b, i)));
        put<uint16_t>(out, i, BFloat16(ref_f32(op, x, y, scale)).bits);
        break;
      }
      case DType::Float32:
        put<float>(out, i, ref_f32(op, get<float>(a, i), get<float>(b, i), scale));
        break;
      case DType::Float64:
        put<double>(out, i, ref_f64(op, get<double>(a, i), get<double>(b, i), scale));
        break;
      default:
        put_int_bits(t, out, i, ref_int(t, op, int_value(t, a, i), int_value(t, b, i)));
        break;
    }
  }
}

bool is_nan_at(DType t, const uint8_t* p, size_t i) {
  switch (t) {
    case DType::Float16:
      return (get<uint16_t>(p, i) & 0x7fff) > 0x7c00;
    case DType::BFloat16:
      return (get<uint16_t>(p, i) & 0x7fff) > 0x7f80;
    case DType::Float32:
      return std::isnan(get<float>(p, i));
    case DType::Float64:
      return std::isnan(get<double>(p, i));
    default:
      return false;
  }
}

std::string hex_at(DType t, const uint8_t* p, size_t i) {
  static const char* kDigits = "0123456789abcdef";
  std::string s = "0x";
  size_t w = dtype_size(t);
  for (size_t k = w; k-- > 0;) {
    uint8_t byte = p[i * w + k];
    s += kDigits[byte >> 4];
    s += kDigits[byte & 15];
  }
  return s;
}

// Compares n results bit for bit. The one freedom: when both inputs of an arithmetic op
// (SUM, PRODUCT, PREMUL_SUM) are NaN, which NaN comes out depends on operand order, which
// the compiler may swap; then any NaN is accepted. (Off x86 the NaN rules of the FPU differ
// from the float64 reference's, so any NaN is accepted for a NaN result.) Reports the first
// few mismatches.
void expect_same(DType t, const uint8_t* got, const uint8_t* want, const uint8_t* a,
                 const uint8_t* b, size_t n, const std::string& what, bool arithmetic) {
  size_t w = dtype_size(t);
  int reported = 0;
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    bool ok = std::memcmp(got + i * w, want + i * w, w) == 0;
#if defined(__x86_64__)
    bool any_nan = arithmetic && is_nan_at(t, a, i) && is_nan_at(t, b, i);
#else
    bool any_nan = true;
#endif
    if (!ok && any_nan && is_nan_at(t, want, i)) ok = is_nan_at(t, got, i);
    if (ok) continue;
    ++bad;
    if (reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " of " << n << ": a=" << hex_at(t, a, i)
                    << " b=" << hex_at(t, b, i) << " got " << hex_at(t, got, i) << " want "
                    << hex_at(t, want, i);
    }
  }
  if (bad > 5) ADD_FAILURE() << what << ": " << bad << " mismatches in all";
}

// Random inputs: raw bit patterns (every special value: NaN, inf, subnormals, -0, extremes)
// mixed with ordinary values, so that sums and products are mostly finite.
void fill_random(DType t, uint8_t* p, size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> real(-1000.0, 1000.0);
  for (size_t i = 0; i < n; ++i) {
    uint64_t bits = rng();
    bool raw = (bits & 3) == 0;
    switch (t) {
      case DType::Bool:
        put<uint8_t>(p, i, raw ? static_cast<uint8_t>(bits >> 8) : (bits >> 9) & 1);
        break;
      case DType::Float16:
        put<uint16_t>(p, i,
                      raw ? static_cast<uint16_t>(bits >> 16)
                          : Half(static_cast<float>(real(rng) / 16)).bits);
        break;
      case DType::BFloat16:
        put<uint16_t>(
            p, i,
            raw ? static_cast<uint16_t>(bits >> 16) : BFloat16(static_cast<float>(real(rng))).bits);
        break;
      case DType::Float32:
        if (raw) {
          put<uint32_t>(p, i, static_cast<uint32_t>(bits >> 16));
        } else {
          put<float>(p, i, static_cast<float>(real(rng)));
        }
        break;
      case DType::Float64:
        if (raw) {
          put<uint64_t>(p, i, rng());
        } else {
          put<double>(p, i, real(rng));
        }
        break;
      default:
        put_int_bits(t, p, i, bits >> 3);
        break;
    }
  }
}

// ---- the sweep: path x dtype, every op, size and buffer layout ---------------------------

struct SweepParam {
  ReduceIsa isa;
  DType dtype;
};

std::string sweep_name(const testing::TestParamInfo<SweepParam>& info) {
  return std::string(isa_name(info.param.isa)) + "_" + dtype_name(info.param.dtype);
}

class ReduceSweep : public testing::TestWithParam<SweepParam> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam().isa)) {
      GTEST_SKIP() << isa_name(GetParam().isa) << " is not available on this CPU or build";
    }
  }
};

enum class Layout { kSeparate, kDstIsA, kDstIsB, kUnaligned, kStreaming };
constexpr Layout kLayouts[] = {Layout::kSeparate, Layout::kDstIsA, Layout::kDstIsB,
                               Layout::kUnaligned, Layout::kStreaming};
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kSeparate:
      return "dst separate";
    case Layout::kDstIsA:
      return "dst==a";
    case Layout::kDstIsB:
      return "dst==b";
    case Layout::kUnaligned:
      return "all pointers +1 byte";
    case Layout::kStreaming:
      return "streaming stores, dst +1 element";
  }
  return "?";
}

TEST_P(ReduceSweep, EveryOpSizeAndLayoutMatchesReference) {
  const ReduceIsa isa = GetParam().isa;
  const DType t = GetParam().dtype;
  const size_t w = dtype_size(t);
  std::mt19937_64 rng(1234 + static_cast<int>(t));
  const double scale = 0.3;  // not a power of two: the premultiplication rounds
  int checked = 0;
  for (ReduceOp op : kAllOps) {
    if (!reduce_op_supports(op, t)) continue;
    for (size_t n : kSizes) {
      for (Layout layout : kLayouts) {
        // Buffers with 64 bytes of slack before and after, to offset and to catch overruns.
        const size_t bytes = n * w + 128;
        std::vector<uint8_t> abuf(bytes), bbuf(bytes), dbuf(bytes, 0xa5), want(n * w + 1);
        const size_t off = layout == Layout::kUnaligned ? 65 : 64;
        uint8_t* a = abuf.data() + off;
        uint8_t* b = bbuf.data() + off;
        fill_random(t, a, n, rng);
        fill_random(t, b, n, rng);
        reference(t, op, a, b, want.data(), n, scale);
        std::vector<uint8_t> a_in(n * w + 1), b_in(n * w + 1);  // never empty: data() != null
        std::memcpy(a_in.data(), a, n * w);
        std::memcpy(b_in.data(), b, n * w);
        uint8_t* d = layout == Layout::kDstIsA      ? a
                     : layout == Layout::kDstIsB    ? b
                     : layout == Layout::kStreaming ? dbuf.data() + 64 + w
                                                    : dbuf.data() + off;
        size_t nt = layout == Layout::kStreaming ? 0 : kNever;
        reduce2_on(isa, d, a, b, n, t, op, scale, nt);
        std::string what = std::string(isa_name(isa)) + " " + dtype_name(t) + " " +
                           reduce_op_name(op) + " n=" + std::to_string(n) + " " +
                           layout_name(layout);
        expect_same(t, d, want.data(), a_in.data(), b_in.data(), n, what,
                    op != ReduceOp::MIN && op != ReduceOp::MAX);
        // Inputs that are not the output stay untouched; nothing is written around dst.
        if (d != a) {
          EXPECT_EQ(0, std::memcmp(a, a_in.data(), n * w)) << what << ": a changed";
        }
        if (d != b) {
          EXPECT_EQ(0, std::memcmp(b, b_in.data(), n * w)) << what << ": b changed";
        }
        if (d != a && d != b) {
          size_t d_off = static_cast<size_t>(d - dbuf.data());
          for (size_t k = 0; k < d_off; ++k) ASSERT_EQ(dbuf[k], 0xa5) << what << ": underrun";
          for (size_t k = d_off + n * w; k < bytes; ++k) {
            ASSERT_EQ(dbuf[k], 0xa5) << what << ": overrun";
          }
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

std::vector<SweepParam> sweep_params() {
  std::vector<SweepParam> v;
  for (int k = 0; k < kNumReduceIsas; ++k) {
    auto isa = static_cast<ReduceIsa>(k);
    for (int i = 0; i < kNumDTypes; ++i) v.push_back({isa, static_cast<DType>(i)});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Paths, ReduceSweep, testing::ValuesIn(sweep_params()), sweep_name);

// ---- finishing helpers and scaling, per path -----------------------------------------------

class ReducePath : public testing::TestWithParam<ReduceIsa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << isa_name(GetParam()) << " unavailable";
  }
};

TEST_P(ReducePath, FinishAvgDividesFloatingTypes) {
  std::mt19937_64 rng(7);
  for (DType t : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64}) {
    for (size_t n : kSizes) {
      const size_t w = dtype_size(t);
      std::vector<uint8_t> buf(n * w + 1), want(n * w + 1);
      uint8_t* p = buf.data() + 1;  // unaligned
      fill_random(t, p, n, rng);
      std::vector<uint8_t> in(p, p + n * w);
      for (size_t i = 0; i < n; ++i) {
        switch (t) {
          case DType::Float16:
            put<uint16_t>(
                want.data(), i,
                Half(static_cast<float>(Half::from_bits(get<uint16_t>(p, i))) / 3.0f).bits);
            break;
          case DType::BFloat16:
            put<uint16_t>(
                want.data(), i,
                BFloat16(static_cast<float>(BFloat16::from_bits(get<uint16_t>(p, i))) / 3.0f).bits);
            break;
          case DType::Float32:
            put<float>(want.data(), i, get<float>(p, i) / 3.0f);
            break;
          default:
            put<double>(want.data(), i, get<double>(p, i) / 3.0);
            break;
        }
      }
      finish_avg_on(GetParam(), p, n, t, 3);
      expect_same(t, p, want.data(), in.data(), in.data(), n,
                  std::string("finish_avg ") + dtype_name(t) + " n=" + std::to_string(n), false);
    }
  }
}

TEST_P(ReducePath, ScaleMultipliesInTheComputeType) {
  std::mt19937_64 rng(8);
  for (DType t : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64}) {
    for (size_t n : kSizes) {
      const size_t w = dtype_size(t);
      std::vector<uint8_t> src(n * w + 1), dst(n * w + 1), want(n * w + 1);
      fill_random(t, src.data(), n, rng);
      for (size_t i = 0; i < n; ++i) {
        const float f = 0.3f;
        switch (t) {
          case DType::Float16:
            put<uint16_t>(
                want.data(), i,
                Half(static_cast<float>(Half::from_bits(get<uint16_t>(src.data(), i))) * f).bits);
            break;
          case DType::BFloat16:
            put<uint16_t>(
                want.data(), i,
                BFloat16(static_cast<float>(BFloat16::from_bits(get<uint16_t>(src.data(), i))) * f)
                    .bits);
            break;
          case DType::Float32:
            put<float>(want.data(), i, get<float>(src.data(), i) * f);
            break;
          default:
            put<double>(want.data(), i, get<double>(src.data(), i) * 0.3);
            break;
        }
      }
      scale_on(GetParam(), dst.data() + 1, src.data(), n, t, 0.3);  // unaligned dst
      expect_same(t, dst.data() + 1, want.data(), src.data(), src.data(), n,
                  std::string("scale ") + dtype_name(t) + " n=" + std::to_string(n), false);
    }
  }
}

// NaN in either operand (first, second, both; quiet and signalling) gives NaN for MIN and MAX
// on every floating type, in the vector body and in the tail.
TEST_P(ReducePath, MinMaxPropagateNaN) {
  const size_t n = 37;
  for (DType t : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64}) {
    const size_t w = dtype_size(t);
    auto make = [&](double v, bool snan) {
      std::vector<uint8_t> bytes(w);
      if (std::isnan(v)) {
        switch (t) {
          case DType::Float16:
            put<uint16_t>(bytes.data(), 0, snan ? 0x7c01 : 0x7e00);
            break;
          case DType::BFloat16:
            put<uint16_t>(bytes.data(), 0, snan ? 0xff81 : 0x7fc0);
            break;
          case DType::Float32:
            put<uint32_t>(bytes.data(), 0, snan ? 0xff800001u : 0x7fc00000u);
            break;
          default:
            put<uint64_t>(bytes.data(), 0, snan ? 0x7ff0000000000001ull : 0xfff8000000000000ull);
            break;
        }
      } else if (t == DType::Float16) {
        put<uint16_t>(bytes.data(), 0, Half(static_cast<float>(v)).bits);
      } else if (t == DType::BFloat16) {
        put<uint16_t>(bytes.data(), 0, BFloat16(static_cast<float>(v)).bits);
      } else if (t == DType::Float32) {
        put<float>(bytes.data(), 0, static_cast<float>(v));
      } else {
        put<double>(bytes.data(), 0, v);
      }
      return bytes;
    };
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    for (ReduceOp op : {ReduceOp::MIN, ReduceOp::MAX}) {
      for (int pattern = 0; pattern < 6; ++pattern) {
        bool snan = pattern >= 3;
        std::vector<uint8_t> a(n * w), b(n * w), d(n * w);
        for (size_t i = 0; i < n; ++i) {
          // Element i: NaN in a (i%3==0), in b (i%3==1), or both (i%3==2); the other operand
          // is an extreme that MIN/MAX would otherwise pick.
          double other = op == ReduceOp::MIN ? -inf : inf;
          int which = static_cast<int>((i + pattern) % 3);
          std::vector<uint8_t> x = make(which == 1 ? other : nan, snan);
          std::vector<uint8_t> y = make(which == 0 ? other : nan, snan);
          std::memcpy(&a[i * w], x.data(), w);
          std::memcpy(&b[i * w], y.data(), w);
        }
        reduce2_on(GetParam(), d.data(), a.data(), b.data(), n, t, op, 1.0, kNever);
        for (size_t i = 0; i < n; ++i) {
          EXPECT_TRUE(is_nan_at(t, d.data(), i))
              << dtype_name(t) << " " << reduce_op_name(op) << " element " << i << " got "
              << hex_at(t, d.data(), i);
        }
      }
    }
  }
}

TEST_P(ReducePath, IntegersWrapAndHalvesRoundToNearestEven) {
  const ReduceIsa isa = GetParam();
  const size_t n = 70;  // vector body and tail
  std::vector<int8_t> a8(n, 127), b8(n, 1), d8(n);
  reduce2_on(isa, d8.data(), a8.data(), b8.data(), n, DType::Int8, ReduceOp::SUM, 1, kNever);
  for (int8_t v : d8) ASSERT_EQ(v, -128);
  std::vector<uint8_t> u(n, 255), du(n);
  reduce2_on(isa, du.data(), u.data(), u.data(), n, DType::UInt8, ReduceOp::PRODUCT, 1, kNever);
  for (uint8_t v : du) ASSERT_EQ(v, 1);
  std::vector<int64_t> a64(n, std::numeric_limits<int64_t>::max()), d64(n);
  reduce2_on(isa, d64.data(), a64.data(), a64.data(), n, DType::Int64, ReduceOp::PRODUCT, 1,
             kNever);
  for (int64_t v : d64) ASSERT_EQ(v, 1);
  std::vector<int32_t> a32(n, std::numeric_limits<int32_t>::min()), b32(n, -1), d32(n);
  reduce2_on(isa, d32.data(), a32.data(), b32.data(), n, DType::Int32, ReduceOp::SUM, 1, kNever);
  for (int32_t v : d32) ASSERT_EQ(v, std::numeric_limits<int32_t>::max());
  // 2048 + 1 in float16 is a tie between 2048 and 2050: even mantissa, 2048.
  std::vector<uint16_t> h(n, Half(2048.0f).bits), one(n, Half(1.0f).bits), dh(n);
  reduce2_on(isa, dh.data(), h.data(), one.data(), n, DType::Float16, ReduceOp::SUM, 1, kNever);
  for (uint16_t v : dh) ASSERT_EQ(v, Half(2048.0f).bits);
  // 65504 + 16 = 65520 rounds up to infinity.
  std::vector<uint16_t> mx(n, Half(65504.0f).bits), sixteen(n, Half(16.0f).bits);
  reduce2_on(isa, dh.data(), mx.data(), sixteen.data(), n, DType::Float16, ReduceOp::SUM, 1,
             kNever);
  for (uint16_t v : dh) ASSERT_EQ(v, 0x7c00);
  // bfloat16: 256 + 1 ties to 256; 256 + 3 rounds to 260 (mantissa even).
  std::vector<uint16_t> bf(n, BFloat16(256.0f).bits), bf3(n, BFloat16(3.0f).bits);
  std::vector<uint16_t> bone(n, BFloat16(1.0f).bits), db(n);
  reduce2_on(isa, db.data(), bf.data(), bone.data(), n, DType::BFloat16, ReduceOp::SUM, 1, kNever);
  for (uint16_t v : db) ASSERT_EQ(v, BFloat16(256.0f).bits);
  reduce2_on(isa, db.data(), bf.data(), bf3.data(), n, DType::BFloat16, ReduceOp::SUM, 1, kNever);
  for (uint16_t v : db) ASSERT_EQ(v, BFloat16(260.0f).bits);
  // bfloat16 subnormals add exactly (the hardware converts would flush them).
  std::vector<uint16_t> sub(n, 0x0001), ds(n);
  reduce2_on(isa, ds.data(), sub.data(), sub.data(), n, DType::BFloat16, ReduceOp::SUM, 1, kNever);
  for (uint16_t v : ds) ASSERT_EQ(v, 0x0002);
  // Bool: any non-zero byte is true; results are 0/1.
  std::vector<uint8_t> t1(n, 0x80), t2(n, 0x01), db8(n);
  reduce2_on(isa, db8.data(), t1.data(), t2.data(), n, DType::Bool, ReduceOp::BAND, 1, kNever);
  for (uint8_t v : db8) ASSERT_EQ(v, 1);
  reduce2_on(isa, db8.data(), t1.data(), t2.data(), n, DType::Bool, ReduceOp::BXOR, 1, kNever);
  for (uint8_t v : db8) ASSERT_EQ(v, 0);
}

INSTANTIATE_TEST_SUITE_P(Paths, ReducePath,
                         testing::Values(ReduceIsa::Scalar, ReduceIsa::Avx2, ReduceIsa::Avx512,
                                         ReduceIsa::Avx512Fp16),
                         [](const testing::TestParamInfo<ReduceIsa>& i) {
                           return std::string(isa_name(i.param));
                         });

// ---- the plain entry points, the selection variable, and errors ---------------------------

// Sets an environment variable for one test and re-reads the registry and the ISA choice.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    setenv(name, value, 1);
    config::reload();
  }
  ~ScopedEnv() {
    unsetenv(name_);
    config::reload();
    reload_isa();
  }

 private:
  const char* name_;
};

TEST(ReduceKernels, PlainEntryPointsComposeAvgAndPremulSum) {
  // Three "ranks" contribute; AVG = sum, then divide; PREMUL_SUM = scale own, add scaled.
  std::vector<float> r0 = {1, 2, 3, 4, 5}, r1 = {10, 20, 30, 40, 50}, r2 = {7, 7, 7, 7, 7};
  std::vector<float> acc(5);
  reduce2(acc.data(), r0.data(), r1.data(), 5, DType::Float32, ReduceOp::AVG);
  reduce_into(acc.data(), r2.data(), 5, DType::Float32, ReduceOp::AVG);
  finish_avg(acc.data(), 5, DType::Float32, 3);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(acc[i], (r0[i] + r1[i] + r2[i]) / 3.0f);
  std::vector<double> p0 = {1, 2}, p1 = {3, 4}, pacc(2);
  scale(pacc.data(), p0.data(), 2, DType::Float64, 0.5);
  reduce_into(pacc.data(), p1.data(), 2, DType::Float64, ReduceOp::PREMUL_SUM, 0.5);
  EXPECT_EQ(pacc[0], 2.0);
  EXPECT_EQ(pacc[1], 3.0);
  scale_into(pacc.data(), 2, DType::Float64, 2.0);
  EXPECT_EQ(pacc[1], 6.0);
  // Zero elements: nothing happens, null pointers are fine.
  reduce2(nullptr, nullptr, nullptr, 0, DType::Int32, ReduceOp::SUM);
}

TEST(ReduceKernels, IsaVariableForcesThePath) {
  {
    ScopedEnv env("TPCOMM_REDUCE_ISA", "scalar");
    EXPECT_EQ(reload_isa(), ReduceIsa::Scalar);
    EXPECT_EQ(active_isa(), ReduceIsa::Scalar);
  }
  for (ReduceIsa isa : {ReduceIsa::Avx2, ReduceIsa::Avx512, ReduceIsa::Avx512Fp16}) {
    ScopedEnv env("TPCOMM_REDUCE_ISA", isa_name(isa));
    ReduceIsa got = reload_isa();
    if (isa_supported(isa)) {
      EXPECT_EQ(got, isa);
    } else {
      EXPECT_TRUE(isa_supported(got)) << "fell back to an unsupported path";
    }
    std::vector<int32_t> a = {1, 2, 3}, b = {4, 5, 6};
    reduce_into(a.data(), b.data(), 3, DType::Int32, ReduceOp::SUM);
    EXPECT_EQ(a, (std::vector<int32_t>{5, 7, 9}));
  }
  {
    ScopedEnv env("TPCOMM_REDUCE_ISA", "AUTO");
    ReduceIsa got = reload_isa();
    EXPECT_TRUE(isa_supported(got));
    if (isa_supported(ReduceIsa::Avx512Fp16)) {
      EXPECT_EQ(got, ReduceIsa::Avx512Fp16);
    } else if (isa_supported(ReduceIsa::Avx512)) {
      EXPECT_EQ(got, ReduceIsa::Avx512);
    }
  }
  {
    ScopedEnv env("TPCOMM_REDUCE_ISA", "sse9");
    try {
      reload_isa();
      FAIL() << "a malformed TPCOMM_REDUCE_ISA was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("TPCOMM_REDUCE_ISA"), std::string::npos) << e.what();
    }
  }
}

TEST(ReduceKernels, StreamingThresholdVariable) {
  ScopedEnv env("TPCOMM_REDUCE_NT_THRESHOLD", "1K");
  reload_isa();
  EXPECT_EQ(nt_threshold(), 1024u);
  std::vector<float> a(1000, 1.5f), b(1000, 2.0f), d(1000);
  reduce2(d.data(), a.data(), b.data(), 1000, DType::Float32, ReduceOp::SUM);
  for (float v : d) ASSERT_EQ(v, 3.5f);
}

template <class F>
void expect_invalid(F&& f, const std::string& want) {
  try {
    f();
    ADD_FAILURE() << "no exception; wanted: " << want;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos)
        << "message: " << e.what() << "\nwanted: " << want;
  }
}

TEST(ReduceKernels, RefusesOpsThatDoNotApply) {
  float f[2] = {1, 2};
  int32_t i[2] = {1, 2};
  uint8_t b[2] = {0, 1};
  expect_invalid([&] { reduce_into(f, f, 2, DType::Float32, ReduceOp::BXOR); },
                 "BXOR is not defined on float32: bitwise reductions take integer or bool "
                 "tensors");
  expect_invalid([&] { reduce_into(f, f, 2, DType::Float64, ReduceOp::BAND); },
                 "BAND is not defined on float64");
  expect_invalid([&] { reduce_into(f, f, 1, DType::BFloat16, ReduceOp::BOR); },
                 "BOR is not defined on bfloat16");
  expect_invalid([&] { reduce_into(i, i, 2, DType::Int32, ReduceOp::AVG); },
                 "AVG is not defined on int32: averaging takes floating-point tensors");
  expect_invalid([&] { reduce_into(b, b, 2, DType::Bool, ReduceOp::AVG); },
                 "AVG is not defined on bool");
  expect_invalid([&] { reduce_into(i, i, 2, DType::Int64, ReduceOp::PREMUL_SUM, 2.0); },
                 "PREMUL_SUM is not defined on int64: a pre-multiplied sum takes floating-point");
  expect_invalid([&] { finish_avg(i, 2, DType::Int32, 2); }, "AVG is not defined on int32");
  expect_invalid([&] { finish_avg(f, 2, DType::Float32, 0); },
                 "number of contributions must be positive, got 0");
  expect_invalid([&] { scale_into(i, 2, DType::UInt8, 2.0); },
                 "scale is not defined on uint8: it takes floating-point tensors");
  expect_invalid([&] { reduce_into(f, f, 2, DType::Float32, static_cast<ReduceOp>(42)); },
                 "unknown ReduceOp value 42");
  expect_invalid([&] { reduce_into(f, f, 2, static_cast<DType>(77), ReduceOp::SUM); },
                 "unknown DType value 77");
  expect_invalid([&] { reduce2(f, nullptr, f, 2, DType::Float32, ReduceOp::SUM); },
                 "reduce: null buffer for 2 elements");
  // The public predicate agrees with the kernels on every pair.
  for (int d = 0; d < kNumDTypes; ++d) {
    for (ReduceOp op : kAllOps) {
      auto t = static_cast<DType>(d);
      bool threw = false;
      try {
        check_reduce_op(op, t);
      } catch (const InvalidArgument&) {
        threw = true;
      }
      EXPECT_EQ(!threw, reduce_op_supports(op, t)) << reduce_op_name(op) << " " << dtype_name(t);
    }
  }
}

TEST(ReduceKernels, UnavailablePathIsRefusedClearly) {
  for (ReduceIsa isa : {ReduceIsa::Avx2, ReduceIsa::Avx512, ReduceIsa::Avx512Fp16}) {
    if (isa_supported(isa)) continue;
    float f[1] = {1};
    try {
      reduce2_on(isa, f, f, f, 1, DType::Float32, ReduceOp::SUM, 1.0, kNever);
      ADD_FAILURE() << "unsupported path ran";
    } catch (const NotSupportedError& e) {
      EXPECT_NE(std::string(e.what()).find(isa_name(isa)), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(isa_supported(ReduceIsa::Scalar));
}

}  // namespace
}  // namespace tpcomm::kernels
