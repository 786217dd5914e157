// all_reduce: every algorithm x every (dtype, op) the kernels define x counts 0, 1, 7 and one
// not divisible by the group size, over 1, 2, 3, 4, 5 and 8 ranks on the in-process
// LocalWorld; plus pipelined cases with tiny slices, in place and out of place, 1M elements,
// results identical on every rank, forcing through TPCOMM_ALGO, and the cost model's picks.
// Floats are checked against a float64 reference within the tolerance of coll_test_util.h.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/coll_test_util.h"
#include "collectives/collectives.h"
#include "core/config.h"

namespace tpcomm::coll {
namespace {

using testing::Expected;

struct Case {
  DType dt;
  ReduceOp op;
  size_t count;
  size_t slice;  // 0: default
  bool in_place;
  std::vector<std::vector<uint8_t>> inputs;
  Expected want;
};

constexpr double kScale = 0.375;  // PREMUL_SUM factor (exact in every float type)

std::vector<Case> make_cases(int n) {
  std::vector<Case> cases;
  auto add = [&](DType dt, ReduceOp op, size_t count, size_t slice, bool in_place) {
    Case c{dt, op, count, slice, in_place, {}, {}};
    uint64_t seed = cases.size() * 7919 + static_cast<uint64_t>(n);
    for (int r = 0; r < n; ++r) c.inputs.push_back(testing::make_input(dt, op, r, count, seed));
    c.want = testing::reference(dt, op, kScale, c.inputs, count);
    cases.push_back(std::move(c));
  };
  const size_t odd = 13 * static_cast<size_t>(n) + 3;  // not divisible by n (n > 1)
  int k = 0;
  for (auto [dt, op] : testing::reduce_cases()) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, odd})
      add(dt, op, count, 0, (k++ % 2) == 0);
  }
  // Pipelined: many slices per block, and blocks of different slice counts.
  const std::pair<DType, ReduceOp> piped[] = {
      {DType::Float32, ReduceOp::SUM},        {DType::Int32, ReduceOp::BXOR},
      {DType::BFloat16, ReduceOp::MAX},       {DType::Float64, ReduceOp::AVG},
      {DType::Float16, ReduceOp::PREMUL_SUM}, {DType::UInt8, ReduceOp::PRODUCT},
      {DType::Bool, ReduceOp::BAND},          {DType::Int64, ReduceOp::MIN}};
  for (auto [dt, op] : piped) {
    add(dt, op, 1000 + static_cast<size_t>(n), 40, false);
    add(dt, op, 1000 + static_cast<size_t>(n), 24, true);
  }
  return cases;
}

// Runs every case on n ranks with `algo` forced (by options, or by TPCOMM_ALGO when
// `by_env`); returns failures.
std::vector<std::string> run_cases(const std::string& algo, int n, std::vector<Case>& cases,
                                   bool by_env) {
  std::mutex mu;
  std::vector<std::string> failures;
  // outputs[case][rank]: every rank must end with the same bits.
  std::vector<std::vector<std::vector<uint8_t>>> outputs(cases.size(),
                                                         std::vector<std::vector<uint8_t>>(n));
  testing::run_ranks(n, [&](CollComm& c) {
    const int r = c.rank();
    for (size_t i = 0; i < cases.size(); ++i) {
      Case& k = cases[i];
      std::vector<uint8_t> in = k.inputs[static_cast<size_t>(r)];
      std::vector<uint8_t> out(in.size(), 0xEE);
      AllReduceArgs a;
      a.input = testing::tensor_of(in, k.dt);
      a.output = k.in_place ? a.input : testing::tensor_of(out, k.dt);
      a.op = k.op;
      a.premul_scale = kScale;
      if (!by_env) a.options.algorithm = algo;
      a.options.slice_bytes = k.slice;
      const AlgoInfo& ran = all_reduce(c, a);
      const std::vector<uint8_t>& res = k.in_place ? in : out;
      std::string err = ran.name == algo ? "" : std::string("ran ") + ran.name;
      if (err.empty()) err = testing::compare(k.want, res.data(), 0, k.count);
      if (err.empty() && !k.in_place && in != k.inputs[static_cast<size_t>(r)]) {
        err = "the input of an out-of-place call was modified";
      }
      outputs[i][static_cast<size_t>(r)] = res;
      if (!err.empty()) {
        std::lock_guard<std::mutex> lk(mu);
        if (failures.size() < 10) {
          failures.push_back("rank " + std::to_string(r) + " " + dtype_name(k.dt) + " " +
                             reduce_op_name(k.op) + " count " + std::to_string(k.count) +
                             " slice " + std::to_string(k.slice) +
                             (k.in_place ? " in place: " : ": ") + err);
        }
      }
    }
  });
  for (size_t i = 0; i < cases.size() && failures.size() < 10; ++i) {
    for (int r = 1; r < n; ++r) {
      if (outputs[i][static_cast<size_t>(r)] != outputs[i][0]) {
        failures.push_back(std::string("ranks 0 and ") + std::to_string(r) + " differ: " +
                           dtype_name(cases[i].dt) + " " + reduce_op_name(cases[i].op) + " count " +
                           std::to_string(cases[i].count));
        break;
      }
    }
  }
  return failures;
}

class AllReduceAlgo : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(AllReduceAlgo, EveryDtypeOpAndCount) {
  auto [algo, n] = GetParam();
  std::vector<Case> cases = make_cases(n);
  for (const std::string& f : run_cases(algo, n, cases, false)) ADD_FAILURE() << f;
}

INSTANTIATE_TEST_SUITE_P(All, AllReduceAlgo,
                         ::testing::Combine(::testing::Values("ring", "tree", "recursive_doubling",
                                                              "rabenseifner"),
                                            ::testing::Values(1, 2, 3, 4, 5, 8)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });

class AllReduceLarge : public ::testing::TestWithParam<std::string> {};

TEST_P(AllReduceLarge, OneMillionFloatsAndInt64s) {
  const std::string algo = GetParam();
  for (int n : {3, 4}) {
    std::vector<Case> cases;
    for (auto [dt, op] :
         {std::pair{DType::Float32, ReduceOp::SUM}, std::pair{DType::Int64, ReduceOp::BOR}}) {
      Case c{dt, op, 1u << 20, 0, dt == DType::Int64, {}, {}};
      for (int r = 0; r < n; ++r) c.inputs.push_back(testing::make_input(dt, op, r, c.count, 99));
      c.want = testing::reference(dt, op, kScale, c.inputs, c.count);
      cases.push_back(std::move(c));
    }
    for (const std::string& f : run_cases(algo, n, cases, false)) ADD_FAILURE() << f;
  }
}

INSTANTIATE_TEST_SUITE_P(All, AllReduceLarge,
                         ::testing::Values("ring", "tree", "recursive_doubling", "rabenseifner"));

// TPCOMM_ALGO forces each algorithm; the one that ran is reported and correct.
TEST(AllReduceSelection, TpcommAlgoForcesEachAlgorithm) {
  for (const char* algo : {"ring", "tree", "recursive_doubling", "rabenseifner"}) {
    ::setenv("TPCOMM_ALGO", (std::string("broadcast:ring;allreduce:") + algo).c_str(), 1);
    config::reload();
    std::vector<Case> cases = make_cases(5);
    cases.resize(40);
    for (const std::string& f : run_cases(algo, 5, cases, true)) ADD_FAILURE() << algo << ": " << f;
  }
  ::unsetenv("TPCOMM_ALGO");
  config::reload();
}

// A size range picks one algorithm below the bound and another above it.
TEST(AllReduceSelection, SizeRangesSplitTheChoice) {
  ::setenv("TPCOMM_ALGO", "allreduce:0-64:recursive_doubling;allreduce:65-:ring", 1);
  config::reload();
  testing::run_ranks(3, [](CollComm& c) {
    std::vector<float> small(16, 1.0f), big(17, 1.0f);
    AllReduceArgs a;
    a.input = a.output = Tensor::of(small);
    EXPECT_STREQ(all_reduce(c, a).name, "recursive_doubling");
    a.input = a.output = Tensor::of(big);
    EXPECT_STREQ(all_reduce(c, a).name, "ring");
    EXPECT_EQ(big[0], 3.0f);
  });
  ::unsetenv("TPCOMM_ALGO");
  config::reload();
}

}  // namespace
}  // namespace tpcomm::coll
