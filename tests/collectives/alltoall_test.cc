// all_to_all: every algorithm x every dtype, even blocks (counts 0, 1, 7, 13 per peer) and
// uneven split sizes (including zero-sized and self blocks), in place and out of place, and the
// list form with tensors of different sizes, over 1, 2, 3, 4, 5 and 8 ranks. Byte-exact.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/coll_test_util.h"
#include "collectives/collectives.h"

namespace tpcomm::coll {
namespace {

// Elements rank `from` sends to rank `to` in uneven case `seed`.
int64_t split(int from, int to, uint64_t seed) {
  return static_cast<int64_t>(
      (static_cast<uint64_t>(from) * 7 + static_cast<uint64_t>(to) * 3 + seed) % 5);
}

// The block rank `from` sends to rank `to`.
std::vector<uint8_t> payload(int from, int to, size_t bytes, uint64_t seed) {
  return testing::make_bytes(from * 1000 + to, bytes, seed);
}

struct Case {
  DType dt;
  size_t count;  // even: per peer; ignored when uneven
  bool uneven;
  int mode;  // 0 out of place, 1 in place (even only), 2 list form
};

void run(const std::string& algo, int n, const std::vector<Case>& cases) {
  testing::Failures fails;
  testing::run_ranks(n, [&](CollComm& c) {
    const int r = c.rank();
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& k = cases[i];
      const size_t es = dtype_size(k.dt);
      std::vector<int64_t> in_splits, out_splits;
      std::vector<uint8_t> in, want;
      std::vector<std::vector<uint8_t>> in_parts, out_parts;
      for (int j = 0; j < n; ++j) {
        int64_t s = k.uneven ? split(r, j, i) : static_cast<int64_t>(k.count);
        int64_t t = k.uneven ? split(j, r, i) : static_cast<int64_t>(k.count);
        in_splits.push_back(s);
        out_splits.push_back(t);
        auto p = payload(r, j, static_cast<size_t>(s) * es, i);
        auto q = payload(j, r, static_cast<size_t>(t) * es, i);
        in.insert(in.end(), p.begin(), p.end());
        want.insert(want.end(), q.begin(), q.end());
        in_parts.push_back(p);
        out_parts.emplace_back(q.size(), 0xEE);
      }
      std::vector<uint8_t> out(want.size(), 0xEE);
      CommonOptions o;
      o.algorithm = algo;
      const AlgoInfo* ran;
      if (k.mode == 2) {
        std::vector<Tensor> ins, outs;
        for (auto& p : in_parts)
          ins.push_back(Tensor::raw(p.data(), static_cast<int64_t>(p.size() / es), k.dt));
        for (auto& p : out_parts)
          outs.push_back(Tensor::raw(p.data(), static_cast<int64_t>(p.size() / es), k.dt));
        ran = &all_to_all_list(c, ins, outs, o);
        out.clear();
        for (auto& p : out_parts) out.insert(out.end(), p.begin(), p.end());
      } else {
        AllToAllArgs a;
        a.input = testing::tensor_of(in, k.dt);
        a.output = k.mode == 1 ? a.input : testing::tensor_of(out, k.dt);
        if (k.uneven) {
          a.input_splits = in_splits;
          a.output_splits = out_splits;
        }
        a.options = o;
        ran = &all_to_all(c, a);
        if (k.mode == 1) out = in;
      }
      std::string what = std::string(dtype_name(k.dt)) + (k.uneven ? " uneven" : " even") +
                         " count " + std::to_string(k.count) + " mode " + std::to_string(k.mode);
      if (ran->name != algo) fails.add(r, what + ": ran " + ran->name);
      if (out != want) fails.add(r, what + ": wrong data");
    }
  });
  testing::report(fails);
}

class AllToAllAlgo : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(AllToAllAlgo, EveryDtypeEvenAndUneven) {
  auto [algo, n] = GetParam();
  std::vector<Case> cases;
  int k = 0;
  for (DType dt : testing::all_dtypes()) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{13}}) {
      cases.push_back({dt, count, false, k++ % 3});
    }
    cases.push_back({dt, 0, true, 0});
    cases.push_back({dt, 0, true, 2});
  }
  run(algo, n, cases);
}

INSTANTIATE_TEST_SUITE_P(All, AllToAllAlgo,
                         ::testing::Combine(::testing::Values("pairwise", "linear"),
                                            ::testing::Values(1, 2, 3, 4, 5, 8)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(AllToAllLarge, OneMillionElementsEveryAlgorithm) {
  for (const char* algo : {"pairwise", "linear"})
    run(algo, 4, {{DType::Float32, 1u << 18, false, 0}});
}

}  // namespace
}  // namespace tpcomm::coll
