#include "tpcomm/types.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace tpcomm {
namespace {

TEST(Types, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::BFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::Float64), 8u);
  EXPECT_STREQ(dtype_name(DType::BFloat16), "bfloat16");
  EXPECT_EQ(parse_dtype("fp32"), DType::Float32);
  EXPECT_EQ(parse_dtype("BF16"), DType::BFloat16);
  EXPECT_FALSE(parse_dtype("float128"));
  for (int i = 0; i < kNumDTypes; ++i) {
    auto t = static_cast<DType>(i);
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  }
}

TEST(Types, TensorViews) {
  std::vector<int64_t> v(10);
  Tensor t = Tensor::of(v);
  EXPECT_EQ(t.dtype, DType::Int64);
  EXPECT_EQ(t.numel, 10);
  EXPECT_EQ(t.nbytes(), 80u);
  EXPECT_EQ(t.device, Device::cpu());
  EXPECT_EQ(t.str(), "int64[10] on cpu");
  EXPECT_EQ(Device::cuda(3).str(), "cuda:3");
}

TEST(Types, ReduceOps) {
  EXPECT_FALSE(reduce_op_supports(ReduceOp::BXOR, DType::Float32));
  EXPECT_TRUE(reduce_op_supports(ReduceOp::BXOR, DType::Int32));
  EXPECT_TRUE(reduce_op_supports(ReduceOp::BOR, DType::Bool));
  EXPECT_EQ(parse_reduce_op("product"), ReduceOp::PRODUCT);
  EXPECT_STREQ(reduce_op_name(ReduceOp::PREMUL_SUM), "premul_sum");
}

// Every binary16 value round-trips exactly through float.
TEST(Types, HalfRoundTripsAllValues) {
  for (uint32_t b = 0; b < 65536; ++b) {
    Half h = Half::from_bits(static_cast<uint16_t>(b));
    float f = static_cast<float>(h);
    Half back(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(static_cast<float>(back)));
    } else {
      EXPECT_EQ(back.bits, b) << "bits " << b << " float " << f;
    }
  }
}

TEST(Types, HalfRoundsToNearestEven) {
  EXPECT_EQ(Half(1.0f).bits, 0x3c00);
  EXPECT_EQ(Half(65504.0f).bits, 0x7bff);
  EXPECT_EQ(Half(65520.0f).bits, 0x7c00);  // rounds up to inf
  EXPECT_EQ(Half(1.0f + 1.0f / 2048).bits, 0x3c00);  // halfway, even stays
  EXPECT_EQ(Half(1.0f + 3.0f / 2048).bits, 0x3c02);  // halfway, odd rounds up
  EXPECT_EQ(Half(5.960464477539063e-08f).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(Half(-0.0f).bits, 0x8000);
}

TEST(Types, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  float halfway;
  uint32_t x = 0x3f808000u;  // exactly between 0x3f80 and 0x3f81
  std::memcpy(&halfway, &x, 4);
  EXPECT_EQ(BFloat16(halfway).bits, 0x3f80);
  x = 0x3f818000u;
  std::memcpy(&halfway, &x, 4);
  EXPECT_EQ(BFloat16(halfway).bits, 0x3f82);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t b = 0; b < 65536; ++b) {
    BFloat16 h = BFloat16::from_bits(static_cast<uint16_t>(b));
    float f = static_cast<float>(h);
    if (!std::isnan(f)) {
      EXPECT_EQ(BFloat16(f).bits, b);
    }
  }
}

}  // namespace
}  // namespace tpcomm
