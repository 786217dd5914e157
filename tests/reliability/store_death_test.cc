// The store's server dying mid-job (issue: never hang silently): a TCPStore server in its own
// process is killed with SIGKILL while 3 ranks run collectives; a rank blocked in a store call,
// a rank calling the store afterwards, and a rank blocked in a collective (which polls the
// group's store for notices) each get a StoreError naming host:port within seconds.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
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
using Clock = std::chrono::steady_clock;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A TCPStore server in a child process; its port comes back through a pipe.
struct ServerProcess {
  pid_t pid = -1;
  uint16_t port = 0;

  void start() {
    pid = detail::start_store_server(TCPStoreOptions{}.timeout, &port);
    ASSERT_GT(pid, 0) << "the store server did not start";
  }
  ~ServerProcess() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// Waits (bounded) until every rank has written its mark file.
void meet(const std::string& dir, const std::string& what, int rank, int n) {
  std::ofstream(dir + "/" + what + std::to_string(rank)) << "1";
  auto end = Clock::now() + seconds(60);
  for (int r = 0; r < n; ++r)
    while (!std::ifstream(dir + "/" + what + std::to_string(r)) && Clock::now() < end)
      std::this_thread::sleep_for(milliseconds(10));
}

TEST(StoreDeath, EveryRankGetsAStoreErrorNamingTheServer) {
  ServerProcess server;
  server.start();
  if (::testing::Test::HasFatalFailure()) return;
  const pid_t server_pid = server.pid;
  const uint16_t port = server.port;
  const std::string where = "127.0.0.1:" + std::to_string(port);
  // Each rank on its own "host": collectives by message passing, which polls the group's
  // store while it waits (the intra-host shm_direct path does not: docs/reliability.md).
  RunOptions opt;
  opt.rank_env = [](int rank) {
    return std::map<std::string, std::string>{{"TPCOMM_HOSTID", "node" + std::to_string(rank)}};
  };
  auto r = run_ranks(
      3,
      [&](RankContext& c) {
        TCPStoreOptions so;
        so.timeout = seconds(60);
        auto store = std::make_shared<TCPStore>("127.0.0.1", port, so);
        InitOptions o;
        o.timeout = seconds(60);
        auto pg = ProcessGroup::create(store, c.rank, c.world_size, o);
        std::vector<float> v(256);
        for (int it = 0; it < 20; ++it) {
          std::fill(v.begin(), v.end(), 1.0f);
          pg->all_reduce(Tensor::of(v));
          ASSERT_EQ(v[0], 3.0f);
        }
        pg->barrier();
        std::string err = "(no error)";
        auto start = Clock::now();
        try {
          if (c.rank == 0) {
            ASSERT_EQ(kill(server_pid, SIGKILL), 0);
            store->get("never_set");  // a call after the server died
          } else if (c.rank == 1) {
            store->wait({"never_set"});  // blocked when the server dies
          } else {
            pg->all_reduce(Tensor::of(v));  // blocked: ranks 0 and 1 never join
          }
        } catch (const StoreError& e) {
          err = std::string("StoreError: ") + e.what();
        } catch (const std::exception& e) {
          err = std::string("not a StoreError: ") + e.what();
        }
        auto took = Clock::now() - start;
        EXPECT_LT(took, seconds(10)) << err;
        EXPECT_TRUE(contains(err, "StoreError: ")) << err;
        EXPECT_TRUE(contains(err, where)) << err;
        if (c.rank == 2) {
          EXPECT_TRUE(contains(err, "all_reduce #21")) << err;
        }
        // Nobody destroys its group (a lost member for the others) before all have failed.
        meet(c.dir, "failed", c.rank, 3);
        pg->destroy();
      },
      opt);
  EXPECT_RANKS_OK(r);
}

}  // namespace
}  // namespace tpcomm::testing
