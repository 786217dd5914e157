// Algorithm catalogues and selection: TPCOMM_ALGO parsing (valid rules, size ranges, every
// error message), precedence (call options, then TPCOMM_ALGO, then the cost model), and the
// cost model's choices at the extremes of message size.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <set>
#include <string>

#include "collectives/select.h"
#include "core/config.h"
#include "tpcomm/error.hpp"

namespace tpcomm::coll {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_algo_rules(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Catalogue, EveryOpHasNamedDescribedAlgorithmsWithIdsInOrder) {
  for (int i = 0; i < kNumCollOps; ++i) {
    CollOp op = static_cast<CollOp>(i);
    auto algos = catalogue(op);
    ASSERT_FALSE(algos.empty()) << coll_op_name(op);
    std::set<std::string> names;
    for (size_t k = 0; k < algos.size(); ++k) {
      EXPECT_EQ(algos[k].id, static_cast<int>(k));
      EXPECT_GT(std::string(algos[k].description).size(), 10u);
      names.insert(algos[k].name);
      EXPECT_EQ(find_algorithm(op, algos[k].name), &algos[k]);
    }
    EXPECT_EQ(names.size(), algos.size());
    EXPECT_EQ(parse_coll_op(coll_op_name(op)), op);
  }
  EXPECT_EQ(parse_coll_op("all_reduce"), CollOp::AllReduce);
  EXPECT_EQ(parse_coll_op("Reduce_Scatter"), CollOp::ReduceScatter);
  EXPECT_EQ(parse_coll_op("all-to-all"), CollOp::AllToAll);
  EXPECT_FALSE(parse_coll_op("allreduc").has_value());
  // Every name TPCOMM_ALGO and --algo accept, shm_direct (one host) included.
  EXPECT_EQ(algorithm_names(CollOp::AllReduce),
            "ring, tree, recursive_doubling, rabenseifner, shm_direct");
}

TEST(AlgoRules, ParsesOpsAlgorithmsAndRanges) {
  auto rules = parse_algo_rules(
      " allreduce:0-64k:recursive_doubling ; allreduce:ring;broadcast:tree, all_gather:1M-:bruck");
  ASSERT_EQ(rules.size(), 4u);
  EXPECT_EQ(rules[0].op, CollOp::AllReduce);
  EXPECT_EQ(rules[0].lo, 0u);
  EXPECT_EQ(rules[0].hi, 65536u);
  EXPECT_STREQ(rules[0].algo->name, "recursive_doubling");
  EXPECT_EQ(rules[1].hi, UINT64_MAX);
  EXPECT_STREQ(rules[2].algo->name, "tree");
  EXPECT_EQ(rules[3].op, CollOp::AllGather);
  EXPECT_EQ(rules[3].lo, 1u << 20);
  EXPECT_EQ(rules[3].hi, UINT64_MAX);
  EXPECT_TRUE(parse_algo_rules("").empty());
  EXPECT_TRUE(parse_algo_rules(" ; ").empty());
  EXPECT_EQ(parse_algo_rules("reduce:-4096:tree")[0].hi, 4096u);
}

TEST(AlgoRules, ErrorsNameTheRuleAndTheValidChoices) {
  std::string e = error_of("allreduce:ring;allredcue:tree");
  EXPECT_NE(e.find("TPCOMM_ALGO"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown collective 'allredcue'"), std::string::npos) << e;
  EXPECT_NE(e.find("allreduce, reduce, allgather"), std::string::npos) << e;
  e = error_of("allreduce:rign");
  EXPECT_NE(e.find("unknown algorithm 'rign' for allreduce"), std::string::npos) << e;
  EXPECT_NE(e.find("valid: ring, tree, recursive_doubling, rabenseifner"), std::string::npos) << e;
  e = error_of("broadcast:tree:ring:x");
  EXPECT_NE(e.find("expected op:algorithm or op:min-max:algorithm"), std::string::npos) << e;
  e = error_of("allreduce:ring");
  EXPECT_EQ(e, "");
  e = error_of("allreduce:64k:ring");
  EXPECT_NE(e.find("has no '-'"), std::string::npos) << e;
  e = error_of("allreduce:1x-2:ring");
  EXPECT_NE(e.find("'1x' is not a size"), std::string::npos) << e;
  e = error_of("allreduce:4k-1k:ring");
  EXPECT_NE(e.find("is empty"), std::string::npos) << e;
  e = error_of("barrier:ring");
  EXPECT_NE(e.find("valid: dissemination"), std::string::npos) << e;
}

TEST(Selection, CallOptionsBeatTheEnvironmentWhichBeatsTheModel) {
  TransportHints h;
  CommonOptions none, forced;
  forced.algorithm = "tree";
  ::setenv("TPCOMM_ALGO", "allreduce:ring", 1);
  config::reload();
  EXPECT_STREQ(select_algorithm(CollOp::AllReduce, 8, 8, h, none, 1 << 19).name, "ring");
  EXPECT_STREQ(select_algorithm(CollOp::AllReduce, 8, 8, h, forced, 1 << 19).name, "tree");
  ::setenv("TPCOMM_ALGO", "allreduce:nope", 1);
  config::reload();
  EXPECT_THROW(select_algorithm(CollOp::AllReduce, 8, 8, h, none, 1 << 19), ConfigError);
  ::unsetenv("TPCOMM_ALGO");
  config::reload();
  forced.algorithm = "nope";
  try {
    select_algorithm(CollOp::Broadcast, 8, 8, h, forced, 1 << 19);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "broadcast: unknown algorithm 'nope' (valid: binomial, ring, tree, shm_direct)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Selection, CostModelPicksLatencyAlgorithmsSmallAndBandwidthAlgorithmsLarge) {
  ::unsetenv("TPCOMM_ALGO");
  config::reload();
  TransportHints tcp{"tcp", 20.0, 2.0, 8.0};
  CommonOptions o;
  const size_t slice = 512 * 1024;
  auto pick = [&](CollOp op, uint64_t bytes, int n) {
    return std::string(select_algorithm(op, bytes, n, tcp, o, slice).name);
  };
  EXPECT_EQ(pick(CollOp::AllReduce, 64, 8), "recursive_doubling");
  EXPECT_EQ(pick(CollOp::AllReduce, 256u << 20, 8), "ring");
  EXPECT_EQ(pick(CollOp::AllReduce, 64, 5), "recursive_doubling");
  EXPECT_EQ(pick(CollOp::Broadcast, 64, 16), "binomial");
  EXPECT_NE(pick(CollOp::Broadcast, 256u << 20, 16), "binomial");
  EXPECT_EQ(pick(CollOp::AllGather, 64, 16), "bruck");
  EXPECT_EQ(pick(CollOp::AllGather, 256u << 20, 16), "ring");
  EXPECT_EQ(pick(CollOp::ReduceScatter, 256u << 20, 6), "ring");
  EXPECT_EQ(pick(CollOp::Gather, 256u << 20, 8), "linear");
  EXPECT_EQ(pick(CollOp::AllToAll, 256u << 20, 8), "pairwise");
  EXPECT_EQ(pick(CollOp::Barrier, 0, 8), "dissemination");
  // Every estimate is finite and positive for n > 1, zero for one rank.
  for (int i = 0; i < kNumCollOps; ++i) {
    for (const AlgoInfo& a : catalogue(static_cast<CollOp>(i))) {
      double t = estimate_us(static_cast<CollOp>(i), a, 1 << 20, 7, tcp, slice);
      EXPECT_GT(t, 0) << a.name;
      EXPECT_LT(t, 1e12) << a.name;
      EXPECT_EQ(estimate_us(static_cast<CollOp>(i), a, 1 << 20, 1, tcp, slice), 0) << a.name;
    }
  }
}

}  // namespace
}  // namespace tpcomm::coll
