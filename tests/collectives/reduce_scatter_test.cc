// reduce_scatter (tensor and list forms): every algorithm x every (dtype, op) x counts 0, 1, 7
// and 13 per rank over 1, 2, 3, 4, 5 and 8 ranks; in place (the output is this rank's block of
// the input) and out of place; tiny slices; 1M elements. Floats within the stated tolerance.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "collectives/coll_test_util.h"
#include "collectives/collectives.h"

namespace tpcomm::coll {
namespace {

constexpr double kScale = 0.5;

struct Case {
  DType dt;
  ReduceOp op;
  size_t count;  // per rank (the output)
  size_t slice;
  int mode;  // 0 out of place, 1 in place, 2 list form
  std::vector<std::vector<uint8_t>> inputs;
  testing::Expected want;
};

void add(std::vector<Case>& cases, int n, DType dt, ReduceOp op, size_t count, size_t slice,
         int mode) {
  Case c{dt, op, count, slice, mode, {}, {}};
  const size_t total = count * static_cast<size_t>(n);
  for (int r = 0; r < n; ++r) {
    c.inputs.push_back(testing::make_input(dt, op, r, total, cases.size() + 5));
  }
  c.want = testing::reference(dt, op, kScale, c.inputs, total);
  cases.push_back(std::move(c));
}

void run(const std::string& algo, int n, const std::vector<Case>& cases) {
  testing::Failures fails;
  testing::run_ranks(n, [&](CollComm& c) {
    const int r = c.rank();
    for (const Case& k : cases) {
      const size_t es = dtype_size(k.dt), block = k.count * es;
      std::vector<uint8_t> in = k.inputs[static_cast<size_t>(r)];
      std::vector<uint8_t> out(block, 0xEE);
      CommonOptions o;
      o.algorithm = algo;
      o.slice_bytes = k.slice;
      const AlgoInfo* ran;
      const uint8_t* result = out.data();
      if (k.mode == 2) {
        std::vector<Tensor> ins;
        for (int j = 0; j < n; ++j) {
          ins.push_back(Tensor::raw(in.data() + static_cast<size_t>(j) * block,
                                    static_cast<int64_t>(k.count), k.dt));
        }
        // Reverse-then-restore would make it non-contiguous; use separate copies instead.
        std::vector<std::vector<uint8_t>> parts;
        for (auto& t : ins) {
          parts.emplace_back(static_cast<uint8_t*>(t.data), static_cast<uint8_t*>(t.data) + block);
        }
        for (size_t j = 0; j < ins.size(); ++j) {
          ins[j] = Tensor::raw(parts[j].data(), static_cast<int64_t>(k.count), k.dt);
        }
        ran = &reduce_scatter_list(c, ins, testing::tensor_of(out, k.dt), k.op, kScale, o);
      } else {
        ReduceScatterArgs a;
        a.input = testing::tensor_of(in, k.dt);
        a.output = testing::tensor_of(out, k.dt);
        if (k.mode == 1) {
          a.output = Tensor::raw(in.data() + static_cast<size_t>(r) * block,
                                 static_cast<int64_t>(k.count), k.dt);
          result = in.data() + static_cast<size_t>(r) * block;
        }
        a.op = k.op;
        a.premul_scale = kScale;
        a.options = o;
        ran = &reduce_scatter(c, a);
      }
      std::string what = std::string(dtype_name(k.dt)) + " " + reduce_op_name(k.op) + " count " +
                         std::to_string(k.count) + " mode " + std::to_string(k.mode);
      if (ran->name != algo) fails.add(r, what + ": ran " + ran->name);
      std::string err = testing::compare(k.want, result, static_cast<size_t>(r) * k.count, k.count);
      if (!err.empty()) fails.add(r, what + ": " + err);
      if (k.mode == 0 && in != k.inputs[static_cast<size_t>(r)]) {
        fails.add(r, what + ": input changed");
      }
    }
  });
  testing::report(fails);
}

class ReduceScatterAlgo : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(ReduceScatterAlgo, EveryDtypeOpAndCount) {
  auto [algo, n] = GetParam();
  std::vector<Case> cases;
  int k = 0;
  for (auto [dt, op] : testing::reduce_cases()) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{13}}) {
      add(cases, n, dt, op, count, 0, k++ % 3);
    }
  }
  add(cases, n, DType::Float32, ReduceOp::SUM, 300, 40, 0);
  add(cases, n, DType::UInt8, ReduceOp::BOR, 301, 7, 1);
  add(cases, n, DType::Float16, ReduceOp::PREMUL_SUM, 77, 10, 2);
  run(algo, n, cases);
}

INSTANTIATE_TEST_SUITE_P(All, ReduceScatterAlgo,
                         ::testing::Combine(::testing::Values("ring", "recursive_halving"),
                                            ::testing::Values(1, 2, 3, 4, 5, 8)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(ReduceScatterLarge, OneMillionElementsEveryAlgorithm) {
  for (const char* algo : {"ring", "recursive_halving"}) {
    std::vector<Case> cases;
    add(cases, 3, DType::Float32, ReduceOp::SUM, (1u << 20) / 3, 0, 0);
    add(cases, 3, DType::Int64, ReduceOp::PRODUCT, 1u << 17, 0, 1);
    run(algo, 3, cases);
  }
}

}  // namespace
}  // namespace tpcomm::coll
