// TPCOMM_ALGO forces every algorithm of every operation: for each (op, algorithm) the variable
// is set to "op:algorithm", a call without an explicit algorithm reports that it ran that one,
// and its result is right (int32 data, exact), over 4 and 5 ranks with a count not divisible
// by the group size. Also one 64 MiB all_reduce with the cost model's own choice.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <numeric>
#include <string>
#include <vector>

#include "collectives/coll_test_util.h"
#include "collectives/collectives.h"
#include "collectives/select.h"
#include "core/config.h"

namespace tpcomm::coll {
namespace {

int32_t val(int rank, size_t i) { return static_cast<int32_t>(rank * 1000 + i); }

// Runs `op` once on rank `c` with inputs val(rank, i); returns "" or what went wrong, and
// the name of the algorithm that ran.
std::string run_op(CollOp op, CollComm& c, const char** ran) {
  const int n = c.size(), r = c.rank();
  const size_t cnt = 11;  // not divisible by 4 or 5
  const int root = n - 2;
  std::vector<int32_t> in(cnt), out(cnt * static_cast<size_t>(n), -1);
  for (size_t i = 0; i < cnt; ++i) in[i] = val(r, i);
  auto sum = [&](size_t i) {
    int32_t s = 0;
    for (int k = 0; k < n; ++k) s += val(k, i);
    return s;
  };
  switch (op) {
    case CollOp::Broadcast: {
      *ran = broadcast(c, {Tensor::of(in), Tensor{}, root}).name;
      for (size_t i = 0; i < cnt; ++i) {
        if (in[i] != val(root, i)) return "broadcast wrong";
      }
      return "";
    }
    case CollOp::AllReduce: {
      *ran = all_reduce(c, {Tensor::of(in), Tensor::of(in)}).name;
      for (size_t i = 0; i < cnt; ++i) {
        if (in[i] != sum(i)) return "all_reduce wrong";
      }
      return "";
    }
    case CollOp::Reduce: {
      *ran = reduce(c, {Tensor::of(in), Tensor::of(in), root}).name;
      for (size_t i = 0; r == root && i < cnt; ++i) {
        if (in[i] != sum(i)) return "reduce wrong";
      }
      return "";
    }
    case CollOp::AllGather:
    case CollOp::Gather: {
      Tensor o = Tensor::of(out.data(), static_cast<int64_t>(cnt) * n);
      *ran = op == CollOp::AllGather ? all_gather(c, {Tensor::of(in), o}).name
                                     : gather(c, {Tensor::of(in), o, root}).name;
      if (op == CollOp::Gather && r != root) return "";
      for (int k = 0; k < n; ++k) {
        for (size_t i = 0; i < cnt; ++i) {
          if (out[static_cast<size_t>(k) * cnt + i] != val(k, i)) return "gather wrong";
        }
      }
      return "";
    }
    case CollOp::Scatter: {
      for (int k = 0; k < n; ++k) {
        for (size_t i = 0; i < cnt; ++i) out[static_cast<size_t>(k) * cnt + i] = val(k, i);
      }
      std::vector<int32_t> mine(cnt);
      *ran = scatter(c, {Tensor::of(out), Tensor::of(mine), root}).name;
      return mine == in ? "" : "scatter wrong";
    }
    case CollOp::ReduceScatter: {
      std::vector<int32_t> big(cnt * static_cast<size_t>(n)), mine(cnt);
      for (size_t i = 0; i < big.size(); ++i) big[i] = val(r, i);
      *ran = reduce_scatter(c, {Tensor::of(big), Tensor::of(mine)}).name;
      for (size_t i = 0; i < cnt; ++i) {
        if (mine[i] != sum(static_cast<size_t>(r) * cnt + i)) return "reduce_scatter wrong";
      }
      return "";
    }
    case CollOp::AllToAll: {
      std::vector<int32_t> send(cnt * static_cast<size_t>(n)), recv(send.size());
      for (size_t i = 0; i < send.size(); ++i) send[i] = val(r, i);
      *ran = all_to_all(c, {Tensor::of(send), Tensor::of(recv)}).name;
      for (int k = 0; k < n; ++k) {
        for (size_t i = 0; i < cnt; ++i) {
          if (recv[static_cast<size_t>(k) * cnt + i] != val(k, static_cast<size_t>(r) * cnt + i)) {
            return "all_to_all wrong";
          }
        }
      }
      return "";
    }
    case CollOp::Barrier:
      *ran = barrier(c).name;
      return "";
  }
  return "unknown op";
}

TEST(CollForced, TpcommAlgoForcesEveryAlgorithmOfEveryOperation) {
  for (int i = 0; i < kNumCollOps; ++i) {
    CollOp op = static_cast<CollOp>(i);
    for (const AlgoInfo& algo : catalogue(op)) {
      std::string rule = std::string(coll_op_name(op)) + ":" + algo.name;
      ::setenv("TPCOMM_ALGO", rule.c_str(), 1);
      config::reload();
      for (int n : {4, 5}) {
        testing::Failures fails;
        testing::run_ranks(n, [&](CollComm& c) {
          const char* ran = "";
          std::string err = run_op(op, c, &ran);
          if (std::string(ran) != algo.name) err += std::string(" ran ") + ran;
          if (!err.empty()) fails.add(c.rank(), rule + " n=" + std::to_string(n) + ": " + err);
        });
        testing::report(fails);
      }
    }
  }
  ::unsetenv("TPCOMM_ALGO");
  config::reload();
}

// One representative 64 MiB case: float32 all_reduce over 4 ranks, algorithm chosen by the
// cost model (ring at this size), exact because the values are small integers.
TEST(CollLarge, AllReduce64MiBFloat32) {
  const size_t count = (64u << 20) / sizeof(float);
  testing::Failures fails;
  testing::run_ranks(4, [&](CollComm& c) {
    std::vector<float> in(count), out(count);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(c.rank() + 1 + i % 7);
    const AlgoInfo& ran = all_reduce(c, {Tensor::of(in), Tensor::of(out)});
    if (std::string(ran.name) != "ring") fails.add(c.rank(), std::string("ran ") + ran.name);
    for (size_t i = 0; i < count; ++i) {
      if (out[i] != static_cast<float>(10 + 4 * (i % 7))) {
        fails.add(c.rank(), "element " + std::to_string(i) + " is " + std::to_string(out[i]));
        break;
      }
    }
  });
  testing::report(fails);
}

}  // namespace
}  // namespace tpcomm::coll
