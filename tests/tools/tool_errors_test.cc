// Tools fail cleanly: a tpcomm error is one line "TOOL: error: ..." and exit status 1, a bad
// command line one line with the hint and status 2; never "terminate called" or SIGABRT, and
// tprun reports a failing worker's exit code. Configuration mistakes are reported at the
// default log level.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "common/shell.h"

namespace {

using Result = tpcomm::testing::ShellResult;
using tpcomm::testing::has;

Result sh(const std::string& cmd) { return tpcomm::testing::run_shell(cmd, 120); }

std::string bin() { return TPCOMM_TEST_BIN_DIR; }

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

void expect_clean_failure(const Result& r, int status, const std::string& line) {
  EXPECT_EQ(r.status, status) << r.out;
  EXPECT_TRUE(has(r.out, line)) << r.out;
  EXPECT_FALSE(has(r.out, "terminate called")) << r.out;
  EXPECT_FALSE(has(r.out, "SIGABRT")) << r.out;
}

TEST(ToolErrors, EachToolFailsWithOneLine) {
  Result r = sh(bin() + "/tpbench -t 2 -b 8 -e 8 --out /nonexistent-dir/r.txt");
  expect_clean_failure(r, 1, "tpbench: error: --out: cannot write '/nonexistent-dir/r.txt'\n");
  r = sh("TPCOMM_TIMEOUT=5sec " + bin() + "/tpinfo");
  expect_clean_failure(r, 1, "tpinfo: error: TPCOMM_TIMEOUT='5sec' is malformed");
  EXPECT_EQ(lines(r.out), 1) << r.out;
  // A port taken by another tpstore.
  r = sh("B=" + bin() +
         "; F=$(mktemp); $B/tpstore --host 127.0.0.1 --port 0 >$F 2>&1 & s=$!; "
         "for i in $(seq 600); do grep -q listening $F && break; sleep 0.1; done; "
         "P=$(sed -n \"s/.*listening on 127.0.0.1:\\([0-9]*\\).*/\\1/p\" $F); "
         "$B/tpstore --host 127.0.0.1 --port $P; rc=$?; kill -INT $s; wait $s; rm -f $F; "
         "exit $rc");
  expect_clean_failure(r, 1, "tpstore: error: ");
  r = sh(bin() + "/tprun --standalone no_such_program_xyz");
  expect_clean_failure(r, 2, "tprun: cannot run 'no_such_program_xyz': not found in PATH");
}

// A worker pointed at a port where no store listens fails at TPCOMM_TIMEOUT, naming the address
// and the variables it came from. The port is bound (never listened on) for the test's length,
// so nothing else can take it and every connect is refused.
TEST(ToolErrors, WrongMasterPortFailsWithinTheTimeout) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string port = std::to_string(ntohs(a.sin_port));
  auto t0 = std::chrono::steady_clock::now();
  Result r = sh("TPCOMM_TIMEOUT=2s RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
                " " + bin() + "/all_reduce_perf -b 8 -e 8");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  close(fd);
  expect_clean_failure(r, 1,
                       "all_reduce_perf: error: rank 1 could not join the job's store: "
                       "cannot reach 127.0.0.1:" +
                           port);
  EXPECT_TRUE(has(r.out, "comes from MASTER_ADDR and MASTER_PORT")) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  // The deadline is 2 s: a bound a loaded machine meets with a wide margin, far below the
  // store's own 300 s default.
  EXPECT_LT(s, 60.0) << r.out;
}

// A worker's tpcomm error: each worker prints its line and exits 1; tprun names the exit code.
TEST(ToolErrors, TprunReportsTheWorkersExitCode) {
  Result r = sh("TPCOMM_TIMEOUT=5sec " + bin() + "/tprun --nproc-per-node 2 --master-port 0 " +
                bin() + "/all_reduce_perf -b 8 -e 8");
  expect_clean_failure(r, 1, "all_reduce_perf: error: TPCOMM_TIMEOUT='5sec' is malformed");
  EXPECT_TRUE(has(r.out, "failed: exit code 1")) << r.out;
  r = sh("TPCOMM_TOPO_FILE=/nonexistent/topo.xml " + bin() +
         "/tprun --nproc-per-node 2 --master-port 0 " + bin() + "/all_reduce_perf -b 8 -e 8");
  expect_clean_failure(r, 1,
                       "all_reduce_perf: error: TPCOMM_TOPO_FILE='/nonexistent/topo.xml' cannot "
                       "be read: No such file or directory");
  r = sh("TPCOMM_DEBUG=trace " + bin() + "/tprun --nproc-per-node 1 --master-port 0 " + bin() +
         "/all_reduce_perf -b 8 -e 8");
#ifndef TPCOMM_ENABLE_TRACE
  expect_clean_failure(r, 1, "TPCOMM_DEBUG='trace': trace lines are not compiled into this build");
#endif
}

// A misspelled variable and an NCCL_* one set by habit: said at the default log level, and the
// job runs.
TEST(ToolErrors, MisconfigurationIsReportedAtTheDefaultLevel) {
  Result r =
      sh("env -u TPCOMM_DEBUG TPCOMM_ALGOS=allreduce:ring NCCL_SOCKET_IFNAME=eth0 " + bin() +
         "/tprun --nproc-per-node 2 --master-port 0 " + bin() + "/all_reduce_perf -b 8 -e 8");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out,
                  "tpcomm: warning: unknown variable TPCOMM_ALGOS is ignored; did you mean "
                  "TPCOMM_ALGO?"))
      << r.out;
  EXPECT_TRUE(has(r.out,
                  "tpcomm: warning: NCCL_SOCKET_IFNAME is set, but tpcomm does not read NCCL_* "
                  "variables: its counterpart is TPCOMM_SOCKET_IFNAME (unset)"))
      << r.out;
  EXPECT_TRUE(has(r.out, "Out of bounds values : 0 OK")) << r.out;
}

}  // namespace
