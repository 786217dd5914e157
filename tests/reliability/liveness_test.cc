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

#include <algorithm>
#include <chrono>
#include <cstdio>
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
        std::printf("[rank %d] %s %s after %.2f s: %s\n", ctx.rank, c.path.c_str(),
                    c.stop ? "stop" : "kill", after_s, err.c_str());
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

// A rank that dies before the group's first collective (before any link to it exists; on
// one host, while the others set up the direct-read collectives through the store): named
// dead at once, not at the deadline.
class LivenessFirstCall : public ::testing::TestWithParam<std::string> {};

TEST_P(LivenessFirstCall, DeathBeforeTheFirstCollectiveIsNamed) {
  if (!path_runs(GetParam())) GTEST_SKIP() << GetParam() << " cannot run here";
  RunOptions opt;
  for (const Path& p : paths())
    if (p.name == GetParam()) opt.env = p.env;
  opt.tcp_store = true;
  opt.may_die = {2};
  opt.timeout = milliseconds(60000);
  auto r = run_ranks(
      3,
      [&](RankContext& ctx) {
        InitOptions o;
        o.timeout = seconds(30);
        auto pg = ProcessGroup::create(ctx.store, ctx.rank, 3, o);
        if (ctx.rank == 2) {
          ctx.store->set("struck_at", std::to_string(now_ns()));
          ::raise(SIGKILL);
        }
        ctx.store->wait({"struck_at"}, seconds(30));
        std::vector<float> v(1024, 1.0f);
        std::string err;
        try {
          pg->all_reduce(Tensor::of(v));
        } catch (const PeerError& e) {
          err = e.what();
        }
        const double after_s =
            static_cast<double>(now_ns() - std::stoll(ctx.store->get_string("struck_at"))) / 1e9;
        EXPECT_LT(after_s, 10.0) << err;
        EXPECT_TRUE(names(err, 2, "dead")) << err;
        // Neither survivor exits (which the other would see) before both have judged.
        if (ctx.store->add("seen", 1) == 2) ctx.store->set("all_seen", "1");
        ctx.store->wait({"all_seen"}, seconds(30));
      },
      opt);
  EXPECT_RANKS_OK(r);
}

INSTANTIATE_TEST_SUITE_P(Paths, LivenessFirstCall,
                         ::testing::Values("shm_direct", "shm", "tcp", "ucx", "ibverbs"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// A job started short: init_process_group fails on every rank that started, within its
// deadline, naming the rank that never joined (and the store it waited at).
TEST(LivenessInit, AShortJobFailsOnEveryStartedRankNamingTheMissingOne) {
  RunOptions opt;
  opt.tcp_store = true;
  opt.timeout = milliseconds(60000);
  auto r = run_ranks(
      3,
      [&](RankContext& ctx) {
        if (ctx.rank == 2) return;  // never joins
        InitOptions o;
        o.timeout = milliseconds(1500);
        const int64_t start = now_ns();
        std::string err;
        try {
          ProcessGroup::create(ctx.store, ctx.rank, 3, o);
        } catch (const TimeoutError& e) {
          err = e.what();
        }
        const double after_s = static_cast<double>(now_ns() - start) / 1e9;
        EXPECT_GE(after_s, 1.4) << err;
        EXPECT_LT(after_s, 10.0) << err;
        EXPECT_NE(err.find("rank 2 did not join within 1500 ms"), std::string::npos) << err;
        EXPECT_NE(err.find("the TCPStore at 127.0.0.1:"), std::string::npos) << err;
      },
      opt);
  EXPECT_RANKS_OK(r);
}

// A timeout that is only a timeout (rank 2 is alive, in another call): the error names the
// rank that did not arrive and says it is alive.
TEST(LivenessShmDirect, PlainTimeoutSaysTheMissingRankIsAlive) {
  RunOptions opt;
  opt.tcp_store = true;
  opt.timeout = milliseconds(60000);
  auto r = run_ranks(
      3,
      [&](RankContext& ctx) {
        auto pg = ProcessGroup::create(ctx.store, ctx.rank, 3);
        std::vector<float> v(1024, 1.0f);
        pg->all_reduce(Tensor::of(v));  // sets up shm_direct on every rank
        ASSERT_EQ(v[0], 3.0f);
        if (ctx.rank == 2) {
          ctx.store->wait({"timed_out_0", "timed_out_1"}, seconds(30));
          return;
        }
        CollectiveOptions co;
        co.timeout = milliseconds(500);
        std::string err;
        try {
          pg->all_reduce(Tensor::of(v), ReduceOp::SUM, co);
        } catch (const TimeoutError& e) {
          err = e.what();
        }
        ctx.store->set("timed_out_" + std::to_string(ctx.rank), "1");
        // Alive until the other has timed out too (an exit would be a loss to it).
        ctx.store->wait({"timed_out_0", "timed_out_1"}, seconds(30));
        EXPECT_NE(err.find("rank 2 (pid "), std::string::npos) << err;
        EXPECT_NE(err.find("is alive and running"), std::string::npos) << err;
        EXPECT_NE(err.find("all_reduce #1"), std::string::npos) << err;
      },
      opt);
  EXPECT_RANKS_OK(r);
}

// ---- every wait point of the direct-read collectives -----------------------------------

// One direct-read collective: `bytes` per rank (per result for broadcast and reduce), the root
// where there is one.
struct WaitCase {
  const char* name;
  const char* op;
  size_t bytes;
  int root;
  const char* cma;  // TPCOMM_SHM_COLL_CMA
  int calls = 1;    // calls whose wait points are covered (the victim's first ones)
};

const WaitCase kWaitCases[] = {
    {"all_reduce_tiny", "all_reduce", 8, -1, "auto"},
    {"all_reduce_small", "all_reduce", 4096, -1, "auto"},
    {"all_reduce_large", "all_reduce", 1 << 20, -1, "auto"},
    {"broadcast_small_root0", "broadcast", 4096, 0, "auto"},
    {"broadcast_small_root1", "broadcast", 4096, 1, "auto", 9},
    {"broadcast_large_root0", "broadcast", 1 << 20, 0, "off"},
    {"broadcast_large_root1", "broadcast", 1 << 20, 1, "off"},
    {"broadcast_direct_root0", "broadcast", 1 << 20, 0, "on"},
    {"all_gather_small", "all_gather", 1024, -1, "auto"},
    {"all_gather_large", "all_gather", 1 << 19, -1, "off"},
    {"all_gather_direct", "all_gather", 1 << 19, -1, "on"},
    {"reduce_scatter_small", "reduce_scatter", 1024, -1, "auto"},
    {"reduce_scatter_large", "reduce_scatter", 1 << 19, -1, "auto"},
    {"reduce_small_root0", "reduce", 4096, 0, "auto", 9},
    {"reduce_large_root1", "reduce", 1 << 20, 1, "auto"},
    {"barrier", "barrier", 0, -1, "auto"},
};

void run_op(ProcessGroup& pg, const WaitCase& w, int n, std::vector<float>& in,
            std::vector<float>& out) {
  const std::string op = w.op;
  if (op == "all_reduce") {
    pg.all_reduce(Tensor::of(in));
  } else if (op == "broadcast") {
    pg.broadcast(Tensor::of(in), w.root);
  } else if (op == "all_gather") {
    pg.all_gather_into_tensor(Tensor::of(out), Tensor::of(in));
  } else if (op == "reduce_scatter") {
    pg.reduce_scatter_tensor(Tensor::of(out), Tensor::of(in));
  } else if (op == "reduce") {
    pg.reduce(Tensor::of(in), w.root);
  } else {
    pg.barrier();
  }
  (void)n;
}

class WaitPoints : public ::testing::TestWithParam<WaitCase> {};

// For K = 1, 2, ...: rank 1 stops itself (TPCOMM_SHM_COLL_STOP_AT=K) on entering its K-th
// wait; ranks 0 and 2 must name it unresponsive. Until K lies beyond the case's calls (its
// first call, or the first 9 where rank 1 posts small messages nobody returns before it
// reuses a slot: a small broadcast from it, a small reduce to another root).
TEST_P(WaitPoints, AStoppedRankIsNamedAtEveryWait) {
  const WaitCase w = GetParam();
  constexpr int n = 3, victim = 1;
  const std::string verdict_file =
      ::testing::TempDir() + "waitpoint_" + w.name + "_" + std::to_string(::getpid());
  int stops = 0;
  for (int k = 1; k <= 64; ++k) {
    ::unlink(verdict_file.c_str());
    RunOptions opt;
    opt.env = {{"TPCOMM_HEARTBEAT_TIMEOUT", "300ms"}, {"TPCOMM_SHM_COLL_CMA", w.cma}};
    opt.rank_env = [k](int rank) {
      std::map<std::string, std::string> e;
      if (rank == victim) e["TPCOMM_SHM_COLL_STOP_AT"] = std::to_string(k);
      return e;
    };
    opt.tcp_store = true;
    opt.may_die = {victim};
    opt.timeout = milliseconds(60000);
    auto r = run_ranks(
        n,
        [&](RankContext& ctx) {
          InitOptions o;
          o.timeout = seconds(30);
          auto pg = ProcessGroup::create(ctx.store, ctx.rank, n, o);
          const size_t count = std::max<size_t>(w.bytes / sizeof(float), 1);
          const bool rs = std::string(w.op) == "reduce_scatter";
          std::vector<float> in(rs ? count * n : count, 1.0f), out(rs ? count : count * n);
          if (ctx.rank == victim) ctx.store->set("victim_pid", std::to_string(::getpid()));
          ctx.store->add("ready", 1);
          ctx.store->wait({"victim_pid"}, seconds(30));
          // Up to 12 calls: a broadcast root runs up to 7 small calls ahead of its readers
          // before it waits on them.
          std::string err;
          for (int call = 1; call <= 12 && err.empty(); ++call) {
            if (ctx.rank == victim) ctx.store->set("victim_call", std::to_string(call));
            try {
              run_op(*pg, w, n, in, out);
            } catch (const Error& e) {
              err = e.what();
            }
          }
          auto beyond = [&] {
            FILE* f = std::fopen(verdict_file.c_str(), "w");
            if (f) std::fclose(f);
          };
          if (err.empty()) {
            // Nobody waited on the victim (K lies beyond its waits here, or the survivors
            // never needed it after it stopped): let it go on, and stop trying further K.
            if (ctx.rank != victim) {
              ::kill(static_cast<pid_t>(std::stol(ctx.store->get_string("victim_pid"))), SIGCONT);
              if (ctx.rank == 0) beyond();
            }
            pg->destroy();
            return;
          }
          ASSERT_NE(ctx.rank, victim) << err;
          EXPECT_TRUE(names(err, victim, "unresponsive")) << "K=" << k << ": " << err;
          if (ctx.store->add("seen", 1) == n - 1) {
            // Stopped after the calls whose wait points this case covers: the last K.
            if (std::stoi(ctx.store->get_string("victim_call")) > w.calls) beyond();
            ::kill(static_cast<pid_t>(std::stol(ctx.store->get_string("victim_pid"))), SIGKILL);
            ctx.store->set("all_seen", "1");
          }
          ctx.store->wait({"all_seen"}, seconds(30));
          pg->destroy();
        },
        opt);
    EXPECT_RANKS_OK(r) << "stopping rank 1 at its wait " << k;
    if (::testing::Test::HasFailure()) break;
    if (::access(verdict_file.c_str(), F_OK) == 0) break;
    ++stops;
  }
  ::unlink(verdict_file.c_str());
  std::printf("%s: rank 1 stopped at each of its %d wait points, named every time\n", w.name,
              stops);
  EXPECT_GE(stops, 1);
}

INSTANTIATE_TEST_SUITE_P(ShmDirect, WaitPoints, ::testing::ValuesIn(kWaitCases),
                         [](const ::testing::TestParamInfo<WaitCase>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace tpcomm::testing
