// Workers against an external tpstore: tpstore on a free port, then tprun --store HOST:PORT on
// each "node" (two tprun processes here): no tprun hosts a store, every worker connects to
// tpstore, and the job runs (a checked tpbench sweep over both nodes' ranks).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "common/shell.h"

namespace {

using Result = tpcomm::testing::ShellResult;
using tpcomm::testing::has;

Result sh(const std::string& cmd) { return tpcomm::testing::run_shell(cmd, 180); }

TEST(ExternalStore, TwoNodesOfTprunMeetThroughTpstore) {
  std::string bin = TPCOMM_TEST_BIN_DIR;
  // tpstore prints its port; both tprun nodes use it; tpstore reports both clients, then stops
  // on SIGINT. Every wait is bounded (the loop, timeout(1) around the whole).
  Result r =
      sh("B=" + bin +
         "; D=$(mktemp -d); "
         "$B/tpstore --host 127.0.0.1 --port 0 --world-size 2 >$D/store 2>&1 & s=$!; "
         "for i in $(seq 600); do grep -q listening $D/store && break; sleep 0.1; done; "
         "P=$(sed -n \"s/.*listening on 127.0.0.1:\\([0-9]*\\).*/\\1/p\" $D/store); "
         "for n in 0 1; do $B/tprun --nnodes 2 --node-rank $n --nproc-per-node 1 "
         "--store 127.0.0.1:$P $B/all_reduce_perf -b 8 -e 1K -f 32 -n 2 -w 1 "
         ">$D/node$n 2>&1 & w[$n]=$!; done; rc=0; for p in ${w[@]}; do wait $p || rc=1; done; "
         "kill -INT $s; wait $s; cat $D/store $D/node0 $D/node1; rm -rf $D; exit $rc");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "tpstore: all 2 clients connected")) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 0]: # all_reduce_perf (tpcomm ")) << r.out;
  EXPECT_TRUE(has(r.out, "2 ranks")) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 0]: # Out of bounds values : 0 OK")) << r.out;
  EXPECT_TRUE(has(r.out, "tpstore stopping (SIGINT)")) << r.out;
}

TEST(ExternalStore, StoreFlagErrors) {
  std::string tprun = TPCOMM_TEST_BIN_DIR;
  tprun += "/tprun";
  Result r = sh(tprun + " --store 127.0.0.1 true");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(has(r.out, "tprun: --store '127.0.0.1' has no port (use HOST:PORT")) << r.out;
  r = sh(tprun + " --store 127.0.0.1:5 --master-port 7 true");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(has(r.out, "--store names the job's store; it does not go with")) << r.out;
}

}  // namespace
