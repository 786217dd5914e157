// reduce: every algorithm x every (dtype, op) x roots 0, n/2, n-1 x counts 0, 1, 7 and one not
// divisible by n, over 1, 2, 3, 4, 5 and 8 ranks; tiny slices; in place and out of place;
// non-roots' buffers untouched; 1M elements. Floats within the stated tolerance.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/coll_test_util.h"
#include "collectives/collectives.h"

namespace tpcomm::coll {
namespace {

constexpr double kScale = 1.25;

struct Case {
  DType dt;
  ReduceOp op;
  size_t count;
  int root;
  size_t slice;
  bool in_place;
  std::vector<std::vector<uint8_t>> inputs;
  testing::Expected want;
};

void add(std::vector<Case>& cases, int n, DType dt, ReduceOp op, size_t count, int root,
         size_t slice, bool in_place) {
  Case c{dt, op, count, root, slice, in_place, {}, {}};
  for (int r = 0; r < n; ++r) {
    c.inputs.push_back(testing::make_input(dt, op, r, count, cases.size() + 17));
  }
  c.want = testing::reference(dt, op, kScale, c.inputs, count);
  cases.push_back(std::move(c));
}

void run(const std::string& algo, int n, const std::vector<Case>& cases) {
  testing::Failures fails;
  testing::run_ranks(n, [&](CollComm& c) {
    const int r = c.rank();
    for (const Case& k : cases) {
      std::vector<uint8_t> in = k.inputs[static_cast<size_t>(r)];
      std::vector<uint8_t> out(in.size(), 0xEE);
      ReduceArgs a;
      a.input = testing::tensor_of(in, k.dt);
      a.output = k.in_place ? a.input : testing::tensor_of(out, k.dt);
      a.root = k.root;
      a.op = k.op;
      a.premul_scale = kScale;
      a.options.algorithm = algo;
      a.options.slice_bytes = k.slice;
      const AlgoInfo& ran = reduce(c, a);
      std::string what = std::string(dtype_name(k.dt)) + " " + reduce_op_name(k.op) + " count " +
                         std::to_string(k.count) + " root " + std::to_string(k.root);
      if (ran.name != algo) fails.add(r, what + ": ran " + ran.name);
      if (r == k.root) {
        std::string err = testing::compare(k.want, (k.in_place ? in : out).data(), 0, k.count);
        if (!err.empty()) fails.add(r, what + ": " + err);
      } else if (in != k.inputs[static_cast<size_t>(r)]) {
        fails.add(r, what + ": a non-root's input changed");
      }
      if (!k.in_place && in != k.inputs[static_cast<size_t>(r)]) {
        fails.add(r, what + ": input of an out-of-place call changed");
      }
    }
  });
  testing::report(fails);
}

class ReduceAlgo : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(ReduceAlgo, EveryDtypeOpRootAndCount) {
  auto [algo, n] = GetParam();
  std::vector<Case> cases;
  std::set<int> roots = {0, n / 2, n - 1};
  int k = 0;
  for (auto [dt, op] : testing::reduce_cases()) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, 13 * static_cast<size_t>(n) + 3}) {
      int root = *std::next(roots.begin(), k % static_cast<int>(roots.size()));
      add(cases, n, dt, op, count, root, 0, (k++ % 2) == 0);
    }
  }
  for (int root : roots) {
    add(cases, n, DType::Float32, ReduceOp::SUM, 1000, root, 40, false);
    add(cases, n, DType::Int16, ReduceOp::MAX, 999, root, 6, true);
    add(cases, n, DType::BFloat16, ReduceOp::AVG, 777, root, 20, false);
  }
  run(algo, n, cases);
}

INSTANTIATE_TEST_SUITE_P(All, ReduceAlgo,
                         ::testing::Combine(::testing::Values("binomial", "tree"),
                                            ::testing::Values(1, 2, 3, 4, 5, 8)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(ReduceLarge, OneMillionElementsEveryAlgorithm) {
  for (const char* algo : {"binomial", "tree"}) {
    std::vector<Case> cases;
    add(cases, 5, DType::Float32, ReduceOp::SUM, 1u << 20, 2, 0, false);
    add(cases, 5, DType::Int32, ReduceOp::BXOR, 1u << 20, 0, 0, true);
    run(algo, 5, cases);
  }
}

}  // namespace
}  // namespace tpcomm::coll
