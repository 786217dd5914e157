// The flight recorder (issue: never hang silently): rings of the last collectives per group,
// dumped per rank on a timeout, a mismatch or SIGUSR1, merged by `tpinfo --trace DIR`, which
// names the rank behind or the call the ranks disagree on; bad dump files give clear errors;
// TPCOMM_FLIGHT_RECORDER=0 writes nothing.
#include "pg/flight_recorder.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/multiproc.h"
#include "tpcomm/collectives.hpp"
#include "tpcomm/tpcomm.hpp"

namespace tpcomm::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs `tpinfo --trace dir`: its output (stdout and stderr) and exit status.
std::pair<std::string, int> tpinfo_trace(const std::string& dir) {
  std::string cmd = std::string(TPCOMM_TEST_BIN_DIR) + "/tpinfo --trace '" + dir + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {"popen failed", -1};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {out, WIFEXITED(st) ? WEXITSTATUS(st) : -1};
}

std::shared_ptr<ProcessGroup> world(RankContext& c, milliseconds timeout) {
  InitOptions o;
  o.timeout = timeout;
  return ProcessGroup::create(c.store, c.rank, c.world_size, o);
}

// Waits (bounded) for a file to appear.
bool wait_for_file(const std::string& path, seconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (!exists(path)) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return true;
}

// A 4-rank job where rank 3 never calls the second all_reduce: the three others time out
// and dump; rank 3 dumps on SIGUSR1; tpinfo --trace names rank 3 as the one behind.
TEST(FlightRecorder, TimeoutDumpsAndTpinfoNamesTheRankBehind) {
  auto r = run_ranks(4, [&](RankContext& c) {
    std::string dir = c.dir + "/fr";
    setenv("TPCOMM_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
    config::reload();
    auto pg = world(c, seconds(3));
    std::vector<float> v(64, 1.0f);
    pg->all_reduce(Tensor::of(v));
    std::string me = dir + "/rank" + std::to_string(c.rank) + ".trace";
    if (c.rank == 3) {
      c.store->wait({"err/0", "err/1", "err/2"}, seconds(60));
      EXPECT_FALSE(exists(me)) << "rank 3 had no error, it must not have dumped yet";
      raise(SIGUSR1);  // the recorder's handler: a dump from its thread
      EXPECT_TRUE(wait_for_file(me, seconds(20))) << me;
      std::string text = read_text(me);
      EXPECT_TRUE(contains(text, "reason SIGUSR1")) << text;
      c.store->set("dumped/3", "1");
      pg->destroy();
      return;
    }
    ::testing::internal::CaptureStderr();
    EXPECT_THROW(pg->all_reduce(Tensor::of(v)), TimeoutError);
    std::string console = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(exists(me)) << "no dump at " << me;
    // The console names the dump at the default log level.
    EXPECT_TRUE(contains(console, "tpcomm: warning: flight recorder: rank " +
                                      std::to_string(c.rank) + " dumped to " + me + " ("))
        << console;
    EXPECT_TRUE(contains(console, "'tpinfo --trace " + dir + "' merges the ranks' dumps"))
        << console;
    std::string text = read_text(me);
    EXPECT_TRUE(contains(text, "tpcomm-flight-recorder v1")) << text;
    EXPECT_TRUE(contains(text, "reason TimeoutError: ")) << text;  // (intra-host: shm_direct)
    EXPECT_TRUE(contains(text, "op seq=0 op=all_reduce dtype=float32 count=64")) << text;
    EXPECT_TRUE(contains(text, "state=completed")) << text;
    EXPECT_TRUE(contains(text, "op seq=1 op=all_reduce")) << text;
    EXPECT_TRUE(contains(text, "state=failed")) << text;
    c.store->set("err/" + std::to_string(c.rank), "1");
    c.store->wait({"dumped/3"}, seconds(60));
    if (c.rank == 0) {
      auto [out, rc] = tpinfo_trace(dir);
      EXPECT_EQ(rc, 0) << out;
      EXPECT_TRUE(contains(out, "4 dump(s)")) << out;
      EXPECT_TRUE(contains(out,
                           "rank 3 is behind: last completed all_reduce #0 while the "
                           "others are at all_reduce #1"))
          << out;
    }
    c.store->set("read/" + std::to_string(c.rank), "1");
    c.store->wait({"read/0"}, seconds(60));
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

// Two ranks call all_reduce, two call broadcast (each rank on its own "host": message
// passing, whose tags carry the signatures): every rank fails and dumps; tpinfo --trace names
// the call and what each side called.
TEST(FlightRecorder, MismatchTpinfoNamesTheDisagreeingCall) {
  RunOptions opt;
  opt.rank_env = [](int rank) {
    return std::map<std::string, std::string>{{"TPCOMM_HOSTID", "node" + std::to_string(rank)}};
  };
  auto r = run_ranks(
      4,
      [&](RankContext& c) {
        std::string dir = c.dir + "/fr";
        setenv("TPCOMM_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
        config::reload();
        auto pg = world(c, seconds(4));
        std::vector<float> v(64, 1.0f);
        try {
          if (c.rank < 2)
            pg->all_reduce(Tensor::of(v));
          else
            pg->broadcast(Tensor::of(v), 0);
          ADD_FAILURE() << "no error";
        } catch (const Error&) {
        }
        EXPECT_TRUE(exists(dir + "/rank" + std::to_string(c.rank) + ".trace"));
        c.store->set("err/" + std::to_string(c.rank), "1");
        c.store->wait({"err/0", "err/1", "err/2", "err/3"}, seconds(60));
        if (c.rank == 0) {
          auto [out, rc] = tpinfo_trace(dir);
          EXPECT_EQ(rc, 0) << out;
          EXPECT_TRUE(contains(out,
                               "call #0 disagrees: ranks 0,1 all_reduce(float32[64], sum) vs "
                               "ranks 2,3 broadcast(float32[64], root 0)"))
              << out;
          c.store->set("read", "1");
        }
        c.store->wait({"read"}, seconds(60));
        pg->destroy();
      },
      opt);
  EXPECT_RANKS_OK(r);
}

// TPCOMM_FLIGHT_RECORDER=0: a timeout writes no dump.
TEST(FlightRecorder, OffWritesNothing) {
  RunOptions opt;
  opt.env = {{"TPCOMM_FLIGHT_RECORDER", "0"}};
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        std::string dir = c.dir + "/fr";
        setenv("TPCOMM_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
        config::reload();
        auto pg = world(c, milliseconds(1500));
        std::vector<float> v(8, 1.0f);
        pg->all_reduce(Tensor::of(v));
        if (c.rank == 0) {
          EXPECT_THROW(pg->all_reduce(Tensor::of(v)), TimeoutError);
        }
        EXPECT_TRUE(tpcomm::detail::fr::dump_flight_recorder("explicit").empty());
        EXPECT_FALSE(exists(dir)) << "the recorder is off but wrote " << dir;
        c.store->set("done/" + std::to_string(c.rank), "1");
        c.store->wait({"done/0", "done/1"}, seconds(60));
        pg->destroy();
      },
      opt);
  EXPECT_RANKS_OK(r);
}

// One rank, in process: the ring keeps the last N calls (N rounded up to a power of two),
// oldest first, with their arguments, algorithm and state; an explicit dump writes them.
TEST(FlightRecorder, RingKeepsTheLastCallsInOrder) {
  char tmpl[] = "/tmp/tpcomm_fr_test_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  setenv("TPCOMM_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
  setenv("TPCOMM_FLIGHT_RECORDER", "3", 1);  // 4 entries
  config::reload();
  {
    auto pg = ProcessGroup::create(std::make_shared<HashStore>(), 0, 1);
    std::vector<int32_t> x(10, 1);
    for (int i = 0; i < 9; ++i) pg->all_reduce(Tensor::of(x), ReduceOp::MAX);
    pg->broadcast(Tensor::of(x), 0);
    auto paths = tpcomm::detail::fr::dump_flight_recorder("explicit test dump");
    ASSERT_EQ(paths.size(), 1u);
    EXPECT_EQ(paths[0], dir + "/rank0.trace");
    std::string text = read_text(paths[0]);
    EXPECT_TRUE(contains(text, "reason explicit test dump")) << text;
    EXPECT_TRUE(contains(text, "capacity=4 recorded=10")) << text;
    EXPECT_FALSE(contains(text, "op seq=5 ")) << text;
    EXPECT_TRUE(contains(text, "op seq=6 op=all_reduce dtype=int32 count=10 bytes=40 redop=max"))
        << text;
    EXPECT_TRUE(contains(text, "op seq=9 op=broadcast dtype=int32 count=10 bytes=40 root=0"))
        << text;
    EXPECT_LT(text.find("op seq=6 "), text.find("op seq=9 ")) << text;
    EXPECT_TRUE(contains(text, "\nend\n")) << text;
    auto [out, rc] = tpinfo_trace(dir);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_TRUE(contains(out, "all ranks agree")) << out;
    pg->destroy();
  }
  unlink((dir + "/rank0.trace").c_str());
  rmdir(dir.c_str());
  unsetenv("TPCOMM_FLIGHT_RECORDER_DIR");
  unsetenv("TPCOMM_FLIGHT_RECORDER");
  config::reload();
}

// Garbage, truncated and foreign files: tpinfo says which file and what is wrong, reads the
// good ones, and exits 1; an empty or missing directory is an error too.
TEST(FlightRecorder, TpinfoRejectsBadDumpsClearly) {
  char tmpl[] = "/tmp/tpcomm_fr_bad_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  auto put = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
  };
  {
    auto [out, rc] = tpinfo_trace(dir);
    EXPECT_EQ(rc, 1);
    EXPECT_TRUE(contains(out, "no readable flight recorder dump")) << out;
  }
  const std::string head =
      "tpcomm-flight-recorder v1\nrank 0\nhost h0\nreason SIGUSR1\n"
      "group id=00000000000000aa name=default_pg group_rank=0 ranks=0,1 capacity=4 recorded=1\n"
      "op seq=0 op=barrier state=completed start_ns=1 end_ns=2\n";
  put("rank0.trace", head + "end\n");
  put("rank1.trace", head.substr(0, head.size() - 20));  // cut mid-line, no end
  put("rank2.trace", std::string("\x7f"
                                 "ELF\x01\x02garbage",
                                 13));
  put("rank3.trace", "tpcomm-flight-recorder v9\nend\n");
  put("rank4.trace",
      "tpcomm-flight-recorder v1\nrank 4\nop seq=x op=barrier state=completed\nend\n");
  auto [out, rc] = tpinfo_trace(dir);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(contains(out, "rank1.trace: is truncated after line 6 (no final 'end' line)")) << out;
  EXPECT_TRUE(contains(out, "rank2.trace: not a tpcomm flight recorder dump")) << out;
  EXPECT_TRUE(contains(out, "rank3.trace: unsupported format 'v9'")) << out;
  EXPECT_TRUE(contains(out, "rank4.trace: line 3: an op line before any group line")) << out;
  EXPECT_TRUE(contains(out, "1 dump(s)")) << out;
  EXPECT_TRUE(contains(out, "rank 1 left no dump here")) << out;
  for (const char* n : {"rank0", "rank1", "rank2", "rank3", "rank4"})
    unlink((dir + "/" + n + ".trace").c_str());
  rmdir(dir.c_str());
  auto [out2, rc2] = tpinfo_trace(dir);
  EXPECT_EQ(rc2, 1);
  EXPECT_TRUE(contains(out2, "cannot open the directory")) << out2;
}

}  // namespace
}  // namespace tpcomm::testing
