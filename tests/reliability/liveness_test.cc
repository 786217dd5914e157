// Liveness on every path (docs/reliability.md, "Dead and silent peers"): a rank killed with
// SIGKILL, or stopped with SIGSTOP, in the middle of an all_reduce loop is named by every
// survivor, as dead or as unresponsive, within seconds; over the intra-host direct-read
// collectives, the shm, tcp and ucx transports and the ibverbs test device; 3 and 4 ranks;
// the victim first, in the middle or last. A rank stopped at each wait point of each
// direct-read algorithm (the TPCOMM_SHM_COLL_STOP_AT hook) is named every time. Nothing is
// left in the shared-memory directory or among the survivors' memfds.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "common/ibverbs_device.h"
#include "common/multiproc.h"
#include "tpcomm/collectives.hpp"
#include "tpcomm/tpcomm.hpp"
#include "tpcomm/transport/transport.hpp"

namespace tpcomm::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

int64_t now_ns() { return std::chrono::steady_clock::now().time_since_epoch().count(); }

// Entries of `dir` (without . and ..), or -1 when it cannot be read.
int count_entries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") ++n;
  }
  ::closedir(d);
  return n;
}

// This process's open memfds.
int count_memfds() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  while (dirent* e = ::readdir(d)) {
    char target[256];
    std::string path = std::string("/proc/self/fd/") + e->d_name;
    ssize_t k = ::readlink(path.c_str(), target, sizeof target - 1);
    if (k > 0 && std::string(target, static_cast<size_t>(k)).starts_with("/memfd:")) ++n;
  }
  ::closedir(d);
  return n;
}

// The paths a rank's death must be seen on: their environment, or "" when the path cannot
// run here (the transport is not built or cannot start).
struct Path {
  const char* name;
  std::map<std::string, std::string> env;
};

std::vector<Path> paths() {
  return {
      {"shm_direct", {}},
      // Message passing over the shm transport (the ring algorithm, not shm_direct).
      {"shm", {{"TPCOMM_TRANSPORT", "shm"}, {"TPCOMM_ALGO", "allreduce:ring"}}},
      {"tcp", {{"TPCOMM_TRANSPORT", "tcp"}}},
      {"ucx", {{"TPCOMM_TRANSPORT", "ucx"}}},
      {"ibverbs", {{"TPCOMM_TRANSPORT", "ibverbs"}}},
  };
}

bool path_runs(const std::string& name) {
  if (name == "ucx") return transport::has_transport("ucx") && transport_starts("ucx");
  if (name == "ibverbs") return ibverbs_for_tests();
  return true;
}

struct Case {
  std::string path;
  int ranks;
  int victim;
  bool stop;  // SIGSTOP instead of SIGKILL
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  return i.param.path + "_" + std::to_string(i.param.ranks) + "ranks_victim" +
         std::to_string(i.param.victim) + (i.param.stop ? "_stop" : "_kill");
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const Path& p : paths())
    for (bool stop : {false, true})
      for (auto [n, v] : {std::pair{3, 0}, {3, 1}, {3, 2}, {4, 0}, {4, 2}, {4, 3}})
        out.push_back({p.name, n, v, stop});
  return out;
}

// The verdict on rank `v` somewhere in `err`: "rank 2 is dead", "rank 2 of the group (global
// rank 2) is unresponsive", ...
bool names(const std::string& err, int v, const char* verdict) {
  std::regex re("rank " + std::to_string(v) + "( of the group \\(global rank " + std::to_string(v) +
                "\\))? is " + verdict);
  return std::regex_search(err, re);
}

class Liveness : public ::testing::TestWithParam<Case> {};

TEST_P(Liveness, EverySurvivorNamesTheVictim) {
  const Case c = GetParam();
  if (!path_runs(c.path)) GTEST_SKIP() << c.path << " cannot run here";
  RunOptions opt;
  for (const Path& p : paths())
    if (p.name == c.path) opt.env = p.env;
  const std::string shm_dir =
      ::testing::TempDir() + "liveness_" + case_name({c, 0}) + "_" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(shm_dir.c_str(), 0700), 0);
  opt.env["TPCOMM_SHM_DIR"] = shm_dir;
  // Short: a stopped rank is named after 1 s (a running one is never blamed: same-host peers
  // are judged by their process state, not by their beats).
  opt.env["TPCOMM_HEARTBEAT_TIMEOUT"] = "1s";
  opt.tcp_store = true;  // the store outlives every rank
  opt.may_die = {c.victim};
  opt.timeout = milliseconds(60000);
  const int n = c.ranks;
  auto r = run_ranks(
      n,
      [&](RankContext& ctx) {
        const int memfds = count_memfds();
        InitOptions o;
        o.timeout = seconds(30);  // the deadline is not what must fire
        auto pg = ProcessGroup::create(ctx.store, ctx.rank, n, o);
        std::vector<float> v(size_t{1} << 18);  // 1 MiB
        std::string err;
        int64_t failed_at = 0;
        for (int it = 0; it < 100000 && err.empty(); ++it) {
          if (ctx.rank == c.victim && it == 5) {
            ctx.store->set("victim_pid", std::to_string(::getpid()));
            ctx.store->set("struck_at", std::to_string(now_ns()));
            ::raise(c.stop ? SIGSTOP : SIGKILL);
          }
          std::fill(v.begin(), v.end(), 1.0f);
          try {
            pg->all_reduce(Tensor::of(v));
            ASSERT_EQ(v[0], static_cast<float>(n));
          } catch (const Error& e) {
            err = e.what();
            failed_at = now_ns();
          }
        }
        ASSERT_FALSE(err.empty());
        ASSERT_NE(ctx.rank, c.victim) << "the victim ran on: " << err;
        const int64_t struck_at = std::stoll(ctx.store->get_string("struck_at"));
        const double after_s = static_cast<double>(failed_at - struck_at) / 1e9;
        EXPECT_LT(after_s, 10.0) << err;
        EXPECT_TRUE(names(err, c.victim, c.stop ? "unresponsive" : "dead")) << err;
        EXPECT_NE(err.find("all_reduce #"), std::string::npos) << err;
        std::printf("[rank %d] %s %s after %.2f s\n", ctx.rank, c.path.c_str(),
                    c.stop ? "stop" : "kill", after_s);
        // No survivor exits (which its peers would see) before all have judged the victim; the
        // last ends a stopped victim.
        if (ctx.store->add("seen", 1) == n - 1) {
          if (c.stop)
            ::kill(static_cast<pid_t>(std::stol(ctx.store->get_string("victim_pid"))), SIGKILL);
          ctx.store->set("all_seen", "1");
        }
        ctx.store->wait({"all_seen"}, seconds(30));
        pg->destroy();
        pg.reset();
        EXPECT_LE(count_memfds(), memfds) << "memfd-backed segments left open";
      },
      opt);
  EXPECT_RANKS_OK(r);
  EXPECT_EQ(count_entries(shm_dir), 0) << "shared-memory files left in " << shm_dir;
  ::rmdir(shm_dir.c_str());
}

INSTANTIATE_TEST_SUITE_P(Paths, Liveness, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tpcomm::testing
