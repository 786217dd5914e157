// barrier: no rank leaves before every rank has entered, over 1..9 ranks, many times in a row.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "collectives/coll_test_util.h"
#include "collectives/collectives.h"

namespace tpcomm::coll {
namespace {

TEST(Barrier, NoRankLeavesBeforeAllEntered) {
  for (int n = 1; n <= 9; ++n) {
    std::atomic<int> entered{0};
    testing::Failures fails;
    testing::run_ranks(n, [&](CollComm& c) {
      for (int round = 1; round <= 20; ++round) {
        entered.fetch_add(1);
        const AlgoInfo& ran = barrier(c);
        int seen = entered.load();
        if (seen < round * n) {
          fails.add(c.rank(), "left round " + std::to_string(round) + " after only " +
                                  std::to_string(seen) + " entries");
        }
        if (std::string(ran.name) != "dissemination") fails.add(c.rank(), ran.name);
        barrier(c);  // keeps the next round's entries out of this round's check
      }
    });
    testing::report(fails);
  }
}

}  // namespace
}  // namespace tpcomm::coll
