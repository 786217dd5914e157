// tpinfo --links end to end: a job of four tpinfo processes on two simulated hosts (TPCOMM_HOSTID
// and a 127.0.0.x address per host) meeting through a TCPStore this test serves. The matrix
// shows shm within a host and a network transport between hosts, with reasons; a link that no
// transport can serve is reported as failed, with advice, and the exit status says so.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "pg/link_report.h"
#include "tpcomm/error.hpp"
#include "tpcomm/process_group.hpp"
#include "tpcomm/store.hpp"

namespace tpcomm::tpinfo {
namespace {

struct Proc {
  pid_t pid = -1;
  std::string out_path;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Starts bin/tpinfo --links as one rank with `env` added; stdout+stderr go to a file.
Proc spawn_rank(const std::string& dir, int rank, const std::vector<std::string>& env,
                const std::vector<std::string>& extra_args) {
  Proc p;
  p.out_path = dir + "/rank" + std::to_string(rank) + ".out";
  std::vector<std::string> args = {std::string(TPCOMM_TEST_BIN_DIR) + "/tpinfo", "--links"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  p.pid = fork();
  if (p.pid == 0) {
    int fd = open(p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) _exit(126);
    dup2(fd, 1);
    dup2(fd, 2);
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return p;
}

// Waits for every process within `timeout` (killing the rest after it); returns exit codes
// (-1 for a killed or crashed one).
std::vector<int> reap(std::vector<Proc>& procs, std::chrono::seconds timeout) {
  std::vector<int> codes(procs.size(), -2);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t left = procs.size();
  while (left > 0) {
    for (size_t i = 0; i < procs.size(); ++i) {
      if (codes[i] != -2) continue;
      int st = 0;
      if (waitpid(procs[i].pid, &st, WNOHANG) == procs[i].pid) {
        codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < procs.size(); ++i)
        if (codes[i] == -2) {
          kill(procs[i].pid, SIGKILL);
          waitpid(procs[i].pid, nullptr, 0);
          codes[i] = -1;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return codes;
}

struct TwoHostJob {
  std::string dir;
  std::vector<int> codes;
  std::vector<std::string> outputs;
};

// Runs 4 ranks: 0 and 1 on host "hostA" (127.0.0.1), 2 and 3 on "hostB" (127.0.0.2).
// `host_b_env` is added to hostB's ranks only.
TwoHostJob run_two_host_job(const std::vector<std::string>& common_env,
                            const std::vector<std::string>& host_b_env) {
  TwoHostJob job;
  char tmpl[] = "/tmp/tpcomm_links_XXXXXX";
  job.dir = mkdtemp(tmpl);
  TCPStoreOptions so;
  so.is_master = true;
  so.world_size = -1;
  so.timeout = std::chrono::seconds(60);
  TCPStore server("127.0.0.1", 0, so);
  std::vector<Proc> procs;
  for (int r = 0; r < 4; ++r) {
    bool b = r >= 2;
    std::vector<std::string> env = {
        "RANK=" + std::to_string(r),
        "LOCAL_RANK=" + std::to_string(r % 2),
        "WORLD_SIZE=4",
        "MASTER_ADDR=127.0.0.1",
        "MASTER_PORT=" + std::to_string(server.port()),
        "TPCOMM_USE_AGENT_STORE=1",
        b ? "TPCOMM_HOSTID=hostB" : "TPCOMM_HOSTID=hostA",
        b ? "TPCOMM_SOCKET_ADDR=127.0.0.2" : "TPCOMM_SOCKET_ADDR=127.0.0.1",
    };
    env.insert(env.end(), common_env.begin(), common_env.end());
    if (b) env.insert(env.end(), host_b_env.begin(), host_b_env.end());
    procs.push_back(spawn_rank(job.dir, r, env, {"--timeout", "60", "--bytes", "262144"}));
  }
  job.codes = reap(procs, std::chrono::seconds(120));
  for (Proc& p : procs) {
    job.outputs.push_back(slurp(p.out_path));
    unlink(p.out_path.c_str());
  }
  rmdir(job.dir.c_str());
  return job;
}

std::string all_output(const TwoHostJob& j) {
  std::string s;
  for (size_t r = 0; r < j.outputs.size(); ++r)
    s += "---- rank " + std::to_string(r) + " ----\n" + j.outputs[r];
  return s;
}

TEST(TpinfoLinks, TwoHostsShowShmWithinAndTcpBetween) {
  // TCP between the hosts (UCX has its own tests; here the choice must be deterministic).
  TwoHostJob j = run_two_host_job({"TPCOMM_TRANSPORT=^ucx,^ibverbs"}, {});
  for (int c : j.codes) ASSERT_EQ(c, 0) << all_output(j);
  const std::string& out = j.outputs[0];
  EXPECT_TRUE(has(out, "Links: transport chosen by each rank")) << out;
  // Rows: rank 0 reaches 1 over shm and 2, 3 over tcp; rank 2 reaches 3 over shm.
  EXPECT_TRUE(has(out, "  0    -    shm  tcp  tcp")) << out;
  EXPECT_TRUE(has(out, "  2    tcp  tcp  -    shm")) << out;
  EXPECT_TRUE(has(out, "shm for 0->1")) << out;
  EXPECT_TRUE(has(out, "tcp for 0->2")) << out;
  EXPECT_TRUE(has(out, "12/12 links ok")) << out;
  // The other ranks print nothing but logs.
  EXPECT_FALSE(has(j.outputs[1], "Links:")) << j.outputs[1];
}

TEST(TpinfoLinks, BetweenHostsUcxIsPreferredWhereUsable) {
  if (!is_ucx_available()) GTEST_SKIP() << "UCX is not built in or not usable here";
  TwoHostJob j = run_two_host_job({"TPCOMM_TRANSPORT=^ibverbs"}, {});
  for (int c : j.codes) ASSERT_EQ(c, 0) << all_output(j);
  const std::string& out = j.outputs[0];
  EXPECT_TRUE(has(out, "  0    -    shm  ucx  ucx")) << out;
  EXPECT_TRUE(has(out, "ucx for 0->2")) << out;
  EXPECT_TRUE(has(out, "different hosts 'hostA' and 'hostB'")) << out;
  EXPECT_TRUE(has(out, "12/12 links ok")) << out;
}

TEST(TpinfoLinks, UnservableLinksAreReportedWithAdvice) {
  // Only shared memory allowed: the links between the two hosts have no transport.
  TwoHostJob j = run_two_host_job({"TPCOMM_TRANSPORT=shm"}, {});
  for (int c : j.codes) ASSERT_EQ(c, 1) << all_output(j);
  const std::string& out = j.outputs[0];
  EXPECT_TRUE(has(out, "  0    -    shm  none! none!")) << out;
  EXPECT_TRUE(has(out, "4/12 links ok")) << out;
  EXPECT_TRUE(has(out, "FAILED rank 0 -> rank 2 over (no transport): no transport connects rank 0 "
                       "to rank 2"))
      << out;
  EXPECT_TRUE(has(out, "advice: no transport reaches the peer")) << out;
}

TEST(TpinfoLinks, RowsRoundTripAndGarbageIsRefused) {
  LinkRow r;
  r.from = 3;
  r.to = 1;
  r.transport = "tcp";
  r.reason = "different hosts\twith a tab";
  r.ok = true;
  r.ms = 2.5;
  std::vector<LinkRow> back = decode_rows(encode_rows({r}), "test");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].from, 3);
  EXPECT_EQ(back[0].to, 1);
  EXPECT_EQ(back[0].transport, "tcp");
  EXPECT_EQ(back[0].reason, "different hosts with a tab");
  EXPECT_TRUE(back[0].ok);
  EXPECT_DOUBLE_EQ(back[0].ms, 2.5);
  try {
    decode_rows("1\t2\tx\n", "rows of rank 1");
    FAIL() << "garbage accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(has(e.what(), "rows of rank 1: line 1 has 3 fields, expected 7")) << e.what();
  }
}

TEST(TpinfoLinks, MissingRankAndFailureAdviceInReport) {
  LinkRow a;
  a.from = 0;
  a.to = 1;
  a.transport = "shm";
  a.reason = "same host";
  a.error = "cannot map segment";
  std::string rep = format_links(2, {a}, 1 << 20);
  EXPECT_TRUE(has(rep, "0/2 links ok")) << rep;
  EXPECT_TRUE(has(rep, "FAILED rank 1 -> rank 0: rank 1 did not report")) << rep;
  EXPECT_TRUE(has(rep, "FAILED rank 0 -> rank 1 over shm: cannot map segment")) << rep;
  EXPECT_TRUE(has(rep, "/dev/shm")) << rep;
}

}  // namespace
}  // namespace tpcomm::tpinfo
