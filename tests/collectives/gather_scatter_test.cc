// gather and scatter (tensor and list forms): every algorithm x every dtype x roots 0, n/2,
// n-1 x counts 0, 1, 7 and 13 over 1, 2, 3, 4, 5 and 8 ranks, in place at the root and out of
// place; 1M elements. Byte-exact.
#include <gtest/gtest.h>

#include <cstring>
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
  int mode;  // 0 out of place, 1 in place at the root, 2 list form
};

std::vector<Case> cases_for(int n) {
  std::vector<Case> cases;
  std::set<int> roots = {0, n / 2, n - 1};
  int k = 0;
  for (int root : roots) {
    for (DType dt : testing::all_dtypes()) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{13}}) {
        cases.push_back({dt, count, root, k++ % 3});
      }
    }
  }
  return cases;
}

std::vector<uint8_t> all_blocks(int n, size_t block, uint64_t seed) {
  std::vector<uint8_t> v;
  for (int j = 0; j < n; ++j) {
    auto b = testing::make_bytes(j, block, seed);
    v.insert(v.end(), b.begin(), b.end());
  }
  return v;
}

void run_gather(const std::string& algo, int n, const std::vector<Case>& cases) {
  testing::Failures fails;
  testing::run_ranks(n, [&](CollComm& c) {
    const int r = c.rank();
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& k = cases[i];
      const size_t block = k.count * dtype_size(k.dt);
      std::vector<uint8_t> want = all_blocks(n, block, i);
      std::vector<uint8_t> in = testing::make_bytes(r, block, i);
      std::vector<uint8_t> out(block * static_cast<size_t>(n), 0xEE);
      CommonOptions o;
      o.algorithm = algo;
      const AlgoInfo* ran;
      if (k.mode == 2) {
        std::vector<std::vector<uint8_t>> parts(static_cast<size_t>(n),
                                                std::vector<uint8_t>(block, 0xEE));
        std::vector<Tensor> outs;
        for (auto& p : parts)
          outs.push_back(Tensor::raw(p.data(), static_cast<int64_t>(k.count), k.dt));
        ran = &gather_list(c, testing::tensor_of(in, k.dt),
                           r == k.root ? outs : std::vector<Tensor>{}, k.root, o);
        for (size_t j = 0; j < parts.size(); ++j) {
          if (block) std::memcpy(out.data() + j * block, parts[j].data(), block);
        }
      } else {
        GatherArgs a;
        a.input = testing::tensor_of(in, k.dt);
        if (k.mode == 1 && r == k.root) {
          if (block) std::memcpy(out.data() + static_cast<size_t>(r) * block, in.data(), block);
          a.input = Tensor::raw(out.data() + static_cast<size_t>(r) * block,
                                static_cast<int64_t>(k.count), k.dt);
        }
        if (r == k.root) a.output = testing::tensor_of(out, k.dt);
        a.root = k.root;
        a.options = o;
        ran = &gather(c, a);
      }
      std::string what = std::string("gather ") + dtype_name(k.dt) + " count " +
                         std::to_string(k.count) + " root " + std::to_string(k.root) + " mode " +
                         std::to_string(k.mode);
      if (ran->name != algo) fails.add(r, what + ": ran " + ran->name);
      if (r == k.root && out != want) fails.add(r, what + ": wrong data");
    }
  });
  testing::report(fails);
}

void run_scatter(const std::string& algo, int n, const std::vector<Case>& cases) {
  testing::Failures fails;
  testing::run_ranks(n, [&](CollComm& c) {
    const int r = c.rank();
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& k = cases[i];
      const size_t block = k.count * dtype_size(k.dt);
      std::vector<uint8_t> src = all_blocks(n, block, i);
      std::vector<uint8_t> want = testing::make_bytes(r, block, i);
      std::vector<uint8_t> out(block, 0xEE);
      CommonOptions o;
      o.algorithm = algo;
      const AlgoInfo* ran;
      if (k.mode == 2) {
        std::vector<std::vector<uint8_t>> parts;
        std::vector<Tensor> ins;
        for (int j = 0; j < n; ++j) parts.push_back(testing::make_bytes(j, block, i));
        for (auto& p : parts)
          ins.push_back(Tensor::raw(p.data(), static_cast<int64_t>(k.count), k.dt));
        ran = &scatter_list(c, r == k.root ? ins : std::vector<Tensor>{},
                            testing::tensor_of(out, k.dt), k.root, o);
      } else {
        ScatterArgs a;
        if (r == k.root) a.input = testing::tensor_of(src, k.dt);
        a.output = testing::tensor_of(out, k.dt);
        if (k.mode == 1 && r == k.root) {
          a.output = Tensor::raw(src.data() + static_cast<size_t>(r) * block,
                                 static_cast<int64_t>(k.count), k.dt);
        }
        a.root = k.root;
        a.options = o;
        ran = &scatter(c, a);
        if (k.mode == 1 && r == k.root && block) {
          std::memcpy(out.data(), src.data() + static_cast<size_t>(r) * block, block);
        }
      }
      std::string what = std::string("scatter ") + dtype_name(k.dt) + " count " +
                         std::to_string(k.count) + " root " + std::to_string(k.root) + " mode " +
                         std::to_string(k.mode);
      if (ran->name != algo) fails.add(r, what + ": ran " + ran->name);
      if (out != want) fails.add(r, what + ": wrong data");
    }
  });
  testing::report(fails);
}

class GatherScatterAlgo : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(GatherScatterAlgo, GatherEveryDtypeRootAndCount) {
  auto [algo, n] = GetParam();
  run_gather(algo, n, cases_for(n));
}

TEST_P(GatherScatterAlgo, ScatterEveryDtypeRootAndCount) {
  auto [algo, n] = GetParam();
  run_scatter(algo, n, cases_for(n));
}

INSTANTIATE_TEST_SUITE_P(All, GatherScatterAlgo,
                         ::testing::Combine(::testing::Values("binomial", "linear"),
                                            ::testing::Values(1, 2, 3, 4, 5, 8)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(GatherScatterLarge, OneMillionElementsEveryAlgorithm) {
  for (const char* algo : {"binomial", "linear"}) {
    std::vector<Case> cases = {{DType::Float32, (1u << 20) / 5, 3, 0},
                               {DType::Float64, 1u << 16, 0, 1}};
    run_gather(algo, 5, cases);
    run_scatter(algo, 5, cases);
  }
}

}  // namespace
}  // namespace tpcomm::coll
