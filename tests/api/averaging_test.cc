// Model averaging over forked ranks: mixed float32 and bfloat16 parameters averaged in place,
// parameters without gradients left alone, one collective per dtype, and non-float refused.
#include <gtest/gtest.h>

#include "api/api_test_util.h"

namespace tpcomm::testing {
namespace {

class AveragingTest : public ::testing::TestWithParam<int> {};

TEST_P(AveragingTest, MixedDtypesAveragedInPlace) {
  auto res = run_ranks(GetParam(), [](RankContext& c) {
    init_world(c);
    int n = c.world_size, r = c.rank;
    std::vector<float> w1(1000), w2(7);
    std::vector<BFloat16> b1(33);
    std::vector<double> frozen(5, r);  // no gradient: untouched
    for (size_t i = 0; i < w1.size(); ++i) w1[i] = static_cast<float>(r * 4 + i % 8);
    for (size_t i = 0; i < w2.size(); ++i) w2[i] = static_cast<float>(-r);
    for (size_t i = 0; i < b1.size(); ++i) b1[i] = BFloat16(static_cast<float>(r * 2));
    std::vector<ParamGroup> groups(2);
    groups[0].params = {{Tensor::of(w1), true}, {Tensor::of(frozen), false}};
    groups[1].params = {{Tensor::of(b1), true}, {Tensor::of(w2), true}};
    EXPECT_EQ(get_params_to_average(groups).size(), 3u);
    average_parameters_or_parameter_groups(groups);
    double mean_r = (n - 1) / 2.0;
    for (size_t i = 0; i < w1.size(); ++i) ASSERT_FLOAT_EQ(w1[i], mean_r * 4 + i % 8) << i;
    for (float v : w2) ASSERT_FLOAT_EQ(v, -mean_r);
    for (BFloat16 v : b1) ASSERT_NEAR(static_cast<float>(v), mean_r * 2, 0.02);
    for (double v : frozen) ASSERT_EQ(v, r);
    // Integers cannot be averaged: refused before any communication.
    std::vector<int32_t> ints(3);
    try {
      average_parameters({Tensor::of(ints)});
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("only floating-point parameters"), std::string::npos);
    }
    destroy_process_group();
  });
  EXPECT_RANKS_OK(res);
}

INSTANTIATE_TEST_SUITE_P(Ranks, AveragingTest, ::testing::Values(1, 2, 3, 5),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

}  // namespace
}  // namespace tpcomm::testing
