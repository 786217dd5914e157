// all_gather (into one tensor, and the list form): every algorithm x every dtype x counts 0, 1,
// 7 and 13 over 1, 2, 3, 4, 5 and 8 ranks; in place (the input is this rank's block of the
// output) and out of place; tiny slices; 1M elements. Byte-exact.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/coll_test_util.h"
#include "collectives/collectives.h"

namespace tpcomm::coll {
namespace {

struct Case {
  DType dt;
  size_t count;  // per rank
  size_t slice;
  int mode;  // 0 out of place, 1 in place, 2 list form
};

void run(const std::string& algo, int n, const std::vector<Case>& cases) {
  testing::Failures fails;
  testing::run_ranks(n, [&](CollComm& c) {
    const int r = c.rank();
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& k = cases[i];
      const size_t block = k.count * dtype_size(k.dt);
      std::vector<uint8_t> want;
      for (int j = 0; j < n; ++j) {
        auto b = testing::make_bytes(j, block, i);
        want.insert(want.end(), b.begin(), b.end());
      }
      std::vector<uint8_t> in = testing::make_bytes(r, block, i);
      std::vector<uint8_t> out(block * static_cast<size_t>(n), 0xEE);
      CommonOptions o;
      o.algorithm = algo;
      o.slice_bytes = k.slice;
      const AlgoInfo* ran;
      if (k.mode == 2) {
        std::vector<std::vector<uint8_t>> parts(static_cast<size_t>(n),
                                                std::vector<uint8_t>(block, 0xEE));
        std::vector<Tensor> outs;
        for (auto& p : parts) outs.push_back(testing::tensor_of(p, k.dt));
        if (block == 0) {  // empty tensors of the right dtype
          for (auto& t : outs) t = Tensor::raw(nullptr, 0, k.dt);
        }
        ran = &all_gather_list(c, testing::tensor_of(in, k.dt), outs, o);
        for (size_t j = 0; j < parts.size(); ++j) {
          if (block) std::memcpy(out.data() + j * block, parts[j].data(), block);
        }
      } else {
        AllGatherArgs a;
        if (k.mode == 1) {
          if (block) std::memcpy(out.data() + static_cast<size_t>(r) * block, in.data(), block);
          a.input = Tensor::raw(out.data() + static_cast<size_t>(r) * block,
                                static_cast<int64_t>(k.count), k.dt);
        } else {
          a.input = testing::tensor_of(in, k.dt);
        }
        a.output = testing::tensor_of(out, k.dt);
        a.options = o;
        ran = &all_gather(c, a);
      }
      std::string what = std::string(dtype_name(k.dt)) + " count " + std::to_string(k.count) +
                         " mode " + std::to_string(k.mode) + " slice " + std::to_string(k.slice);
      if (ran->name != algo) fails.add(r, what + ": ran " + ran->name);
      if (out != want) fails.add(r, what + ": wrong data");
    }
  });
  testing::report(fails);
}

class AllGatherAlgo : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(AllGatherAlgo, EveryDtypeAndCount) {
  auto [algo, n] = GetParam();
  std::vector<Case> cases;
  int k = 0;
  for (DType dt : testing::all_dtypes()) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{13}}) {
      cases.push_back({dt, count, 0, k++ % 3});
    }
  }
  cases.push_back({DType::Float32, 250, 40, 0});
  cases.push_back({DType::Int8, 333, 7, 1});
  run(algo, n, cases);
}

INSTANTIATE_TEST_SUITE_P(All, AllGatherAlgo,
                         ::testing::Combine(::testing::Values("ring", "bruck"),
                                            ::testing::Values(1, 2, 3, 4, 5, 8)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(AllGatherLarge, OneMillionElementsEveryAlgorithm) {
  for (const char* algo : {"ring", "bruck"}) {
    run(algo, 3, {{DType::Float32, (1u << 20) / 3, 0, 0}, {DType::Int64, 1u << 18, 0, 1}});
  }
}

}  // namespace
}  // namespace tpcomm::coll
