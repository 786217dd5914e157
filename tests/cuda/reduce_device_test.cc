// The GPU kernels' arithmetic (src/cuda/reduce_device.h) against the host kernels
// (core/reduce.h), bit for bit: first the shared functors on the host, then every kernel
// launched on the device (the fake driver's host twins in CI, the real kernels in
// tools/gpu_check.sh) on odd lengths at misaligned offsets.
#include "cuda/reduce_device.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/reduce.h"
#include "cuda/cuda_test_util.h"
#include "cuda/kernels.h"
#include "tpcomm/error.hpp"

namespace tpcomm {
namespace {

using namespace cuda::dev;

constexpr DType kDTypes[] = {DType::Bool,    DType::UInt8,  DType::Int8,    DType::Int16,
                             DType::Int32,   DType::Int64,  DType::Float16, DType::BFloat16,
                             DType::Float32, DType::Float64};
constexpr ReduceOp kOps[] = {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN,
                             ReduceOp::MAX, ReduceOp::AVG,     ReduceOp::BAND,
                             ReduceOp::BOR, ReduceOp::BXOR,    ReduceOp::PREMUL_SUM};

TEST(ReduceDevice, HalfConversionsMatchTheHostTypes) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float want = static_cast<float>(Half::from_bits(static_cast<uint16_t>(b)));
    const float got = half_to_float(static_cast<uint16_t>(b));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << b;
    } else {
      ASSERT_EQ(f32_bits(got), f32_bits(want)) << b;
    }
    const float bw = static_cast<float>(BFloat16::from_bits(static_cast<uint16_t>(b)));
    ASSERT_EQ(f32_bits(bf16_to_float(static_cast<uint16_t>(b))), f32_bits(bw)) << b;
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    // Random bit patterns, and values near the float16 range where rounding is subtle.
    const float f = (i & 1) ? f32_from_bits(static_cast<uint32_t>(rng()))
                            : std::ldexp(static_cast<float>(rng() % 100000) / 99999.0f,
                                         static_cast<int>(rng() % 40) - 30);
    ASSERT_EQ(half_from_float(f), Half(f).bits) << f;
    ASSERT_EQ(bf16_from_float(f), BFloat16(f).bits) << f;
  }
}

// Inputs that cover each dtype's corners: random bit patterns (every float16/bfloat16 pattern
// is a value, NaNs and infinities included), small values that sum exactly, zeros of both signs.
std::vector<uint8_t> inputs(DType t, size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  const size_t es = dtype_size(t);
  std::vector<uint8_t> v(n * es);
  for (size_t i = 0; i < n; ++i) {
    uint64_t bits = rng();
    if (t == DType::Float32 && i % 3 == 0) {
      const float f = static_cast<float>(static_cast<int>(bits % 2001) - 1000) / 7.0f;
      std::memcpy(&bits, &f, 4);
    } else if (t == DType::Float64 && i % 3 == 0) {
      const double f = static_cast<double>(static_cast<int>(bits % 2001) - 1000) / 7.0;
      std::memcpy(&bits, &f, 8);
    } else if (i % 17 == 0) {
      bits = (i % 34 == 0) ? 0 : (uint64_t{1} << (es * 8 - 1));  // +0 and -0 / INT_MIN
    }
    std::memcpy(v.data() + i * es, &bits, es);
  }
  return v;
}

// True when the two results agree: the same bytes, or both NaN where the dtype is floating
// (a NaN's payload is not specified).
bool same_element(DType t, const uint8_t* a, const uint8_t* b) {
  const size_t es = dtype_size(t);
  if (std::memcmp(a, b, es) == 0) return true;
  auto nan = [&](const uint8_t* p) {
    uint64_t x = 0;
    std::memcpy(&x, p, es);
    switch (t) {
      case DType::Float16:
        return (x & 0x7c00) == 0x7c00 && (x & 0x3ff) != 0;
      case DType::BFloat16:
        return (x & 0x7f80) == 0x7f80 && (x & 0x7f) != 0;
      case DType::Float32:
        return std::isnan(f32_from_bits(static_cast<uint32_t>(x)));
      case DType::Float64: {
        double d;
        std::memcpy(&d, &x, 8);
        return std::isnan(d);
      }
      default:
        return false;
    }
  };
  return nan(a) && nan(b);
}

// The functors run by a host loop, as the fake's twins run them.
void device_functors_on_host(void* dst, const void* a, const void* b, size_t n, DType t,
                             ReduceOp op, double scale) {
  const std::string name = cuda::reduce_kernel_name(op, t);
  bool found = false;
#define TPCOMM_TEST_RUN(o, dt, Tr, Op)              \
  if (name == "tpcomm_" #o "_" #dt) {               \
    binary_body<Tr, Op>(0, 1, dst, a, b, n, scale); \
    found = true;                                   \
  }
  TPCOMM_CUDA_BINARY_KERNELS(TPCOMM_TEST_RUN)
#undef TPCOMM_TEST_RUN
  ASSERT_TRUE(found) << name;
}

TEST(ReduceDevice, FunctorsMatchTheHostKernelsBitForBit) {
  const size_t n = 4099;
  for (DType t : kDTypes) {
    for (ReduceOp op : kOps) {
      if (!reduce_op_supports(op, t)) continue;
      const auto a = inputs(t, n, 1), b = inputs(t, n, 2);
      std::vector<uint8_t> want(a.size()), got(a.size());
      kernels::reduce2_on(kernels::ReduceIsa::Scalar, want.data(), a.data(), b.data(), n, t, op,
                          0.3, SIZE_MAX);
      device_functors_on_host(got.data(), a.data(), b.data(), n, t, op, 0.3);
      for (size_t i = 0; i < n; ++i) {
        const size_t at = i * dtype_size(t);
        ASSERT_TRUE(same_element(t, want.data() + at, got.data() + at))
            << dtype_name(t) << " " << reduce_op_name(op) << " element " << i;
      }
    }
  }
}

// Every kernel on the device: dst = op(a, b) with dst and a one element past an aligned base
// (misaligned for vector loads), an odd length, then AVG's divide and PREMUL_SUM's scale.
TEST(ReduceDevice, EveryKernelOnTheDevice) {
  const cuda::Driver& d = testing::drv();
  cuda::use_device(d, 0);
  const size_t n = 1001;
  for (DType t : kDTypes) {
    const size_t es = dtype_size(t);
    const size_t bytes = (n + 2) * es;
    CUdeviceptr da = 0, db = 0;
    CU_ASSERT(d.MemAlloc(&da, bytes));
    CU_ASSERT(d.MemAlloc(&db, bytes));
    for (ReduceOp op : kOps) {
      if (!reduce_op_supports(op, t)) continue;
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + reduce_op_name(op));
      const auto a = inputs(t, n, 11), b = inputs(t, n, 12);
      CU_ASSERT(d.MemcpyHtoD(da + es, a.data(), n * es));
      CU_ASSERT(d.MemcpyHtoD(db + 2 * es, b.data(), n * es));
      void* dst = reinterpret_cast<void*>(da + es);
      cuda::launch_reduce(dst, dst, reinterpret_cast<void*>(db + 2 * es), n, t, op, 0.3, nullptr);
      std::vector<uint8_t> want(n * es), got(n * es);
      kernels::reduce2_on(kernels::ReduceIsa::Scalar, want.data(), a.data(), b.data(), n, t, op,
                          0.3, SIZE_MAX);
      if (op == ReduceOp::AVG) {
        cuda::launch_div(dst, n, t, 3, nullptr);
        kernels::finish_avg_on(kernels::ReduceIsa::Scalar, want.data(), n, t, 3);
      }
      if (op == ReduceOp::PREMUL_SUM) {
        cuda::launch_scale(dst, dst, n, t, 1.7, nullptr);
        kernels::scale_on(kernels::ReduceIsa::Scalar, want.data(), want.data(), n, t, 1.7);
      }
      CU_ASSERT(d.MemcpyDtoH(got.data(), da + es, n * es));  // legacy stream: after the kernels
      for (size_t i = 0; i < n; ++i)
        ASSERT_TRUE(same_element(t, want.data() + i * es, got.data() + i * es)) << "element " << i;
    }
    CU_ASSERT(d.MemFree(da));
    CU_ASSERT(d.MemFree(db));
  }
}

TEST(ReduceDevice, UnsupportedOpsAreRefused) {
  EXPECT_THROW(cuda::reduce_kernel_name(ReduceOp::BXOR, DType::Float32), InvalidArgument);
  EXPECT_THROW(cuda::reduce_kernel_name(ReduceOp::AVG, DType::Int32), InvalidArgument);
  EXPECT_EQ(cuda::reduce_kernel_name(ReduceOp::AVG, DType::BFloat16), "tpcomm_sum_bfloat16");
  EXPECT_EQ(cuda::reduce_kernel_name(ReduceOp::PREMUL_SUM, DType::Float64),
            "tpcomm_premul_sum_float64");
}

}  // namespace
}  // namespace tpcomm
