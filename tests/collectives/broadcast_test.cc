// broadcast: every algorithm x every dtype x roots 0, n/2, n-1 x counts 0, 1, 7 and one not
// divisible by n, over 1, 2, 3, 4, 5 and 8 ranks; tiny slices for pipelining; a separate
// source tensor on the root (out of place); 1M elements. Byte-exact.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/coll_test_util.h"
#include "collectives/collectives.h"

namespace tpcomm::coll {
namespace {

struct Case {
  DType dt;
  size_t count;
  int root;
  size_t slice;
  bool separate;  // root passes a separate input
};

void run(const std::string& algo, int n, const std::vector<Case>& cases) {
  testing::Failures fails;
  testing::run_ranks(n, [&](CollComm& c) {
    const int r = c.rank();
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& k = cases[i];
      const size_t bytes = k.count * dtype_size(k.dt);
      std::vector<uint8_t> want = testing::make_bytes(k.root, bytes, i);
      std::vector<uint8_t> buf =
          r == k.root && !k.separate ? want : std::vector<uint8_t>(bytes, 0xEE);
      std::vector<uint8_t> src = want;
      BroadcastArgs a;
      a.tensor = testing::tensor_of(buf, k.dt);
      if (k.separate && r == k.root) a.input = testing::tensor_of(src, k.dt);
      a.root = k.root;
      a.options.algorithm = algo;
      a.options.slice_bytes = k.slice;
      const AlgoInfo& ran = broadcast(c, a);
      std::string what = std::string(dtype_name(k.dt)) + " count " + std::to_string(k.count) +
                         " root " + std::to_string(k.root) + " slice " + std::to_string(k.slice);
      if (ran.name != algo) fails.add(r, what + ": ran " + ran.name);
      if (buf != want) fails.add(r, what + ": wrong data");
      if (src != want) fails.add(r, what + ": source modified");
    }
  });
  testing::report(fails);
}

class BroadcastAlgo : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(BroadcastAlgo, EveryDtypeRootAndCount) {
  auto [algo, n] = GetParam();
  std::vector<Case> cases;
  std::set<int> roots = {0, n / 2, n - 1};
  int k = 0;
  for (int root : roots) {
    for (DType dt : testing::all_dtypes()) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, 13 * static_cast<size_t>(n) + 3}) {
        cases.push_back({dt, count, root, 0, (k++ % 3) == 0});
      }
    }
    cases.push_back({DType::Float32, 1000, root, 40, false});
    cases.push_back({DType::Float16, 999, root, 6, true});
  }
  run(algo, n, cases);
}

INSTANTIATE_TEST_SUITE_P(All, BroadcastAlgo,
                         ::testing::Combine(::testing::Values("binomial", "ring", "tree"),
                                            ::testing::Values(1, 2, 3, 4, 5, 8)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(BroadcastLarge, OneMillionElementsEveryAlgorithm) {
  for (const char* algo : {"binomial", "ring", "tree"}) {
    run(algo, 5, {{DType::Float32, 1u << 20, 3, 0, false}, {DType::Int64, 1u << 20, 0, 0, true}});
  }
}

}  // namespace
}  // namespace tpcomm::coll
