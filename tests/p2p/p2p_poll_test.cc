// Polling Work::is_completed() in a loop (torch's `while not work.is_completed()`, and the
// collectives' test sweeps) drives the transports as a spinning wait does: the progress thread
// stays parked meanwhile instead of sleeping on the transports' fds, where every arrival would
// wake it to contend with the poller for the engine lock and the core (src/p2p/progress.cc).
#include <dirent.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "p2p/p2p_test_util.h"

namespace tpcomm::testing {
namespace {

// Context switches (voluntary + involuntary) of this process's threads named `name`.
long switches_of(const std::string& name) {
  long total = 0;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string base = std::string("/proc/self/task/") + e->d_name;
    std::ifstream comm(base + "/comm");
    std::string c;
    std::getline(comm, c);
    if (c != name) continue;
    std::ifstream st(base + "/status");
    for (std::string line; std::getline(st, line);) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0 ||
          line.rfind("nonvoluntary_ctxt_switches:", 0) == 0) {
        std::istringstream is(line.substr(line.find(':') + 1));
        long v = 0;
        is >> v;
        total += v;
      }
    }
  }
  closedir(d);
  return total;
}

TEST(Poll, IsCompletedLoopKeepsTheProgressThreadParked) {
  // Messages that arrive one by one, 50 us apart: a progress thread asleep on the fds would
  // wake for (nearly) each of them.
  constexpr int kMessages = 2000;
  auto r = run_ranks(2, [&](RankContext& c) {
    auto pg = make_world(c, "tcp");
    int peer = 1 - c.rank;
    int64_t ack = 0;
    pg->send(Tensor::of(&ack, 1), peer);  // both linked and warm before the count starts
    pg->recv(Tensor::of(&ack, 1), peer);
    if (c.rank == 1) {
      for (int32_t i = 0; i < kMessages; ++i) {
        pg->send(Tensor::of(&i, 1), peer);
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    } else {
      long before = switches_of("tpcomm-progress");
      ASSERT_GE(before, 0);
      auto t0 = std::chrono::steady_clock::now();
      for (int32_t i = 0; i < kMessages; ++i) {
        int32_t v = -1;
        auto w = pg->irecv(Tensor::of(&v, 1), peer);
        auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!w->is_completed())
          ASSERT_LT(std::chrono::steady_clock::now(), give_up)
              << "message " << i << " from rank 1 did not arrive within 30 s of polling";
        ASSERT_TRUE(w->is_success());
        ASSERT_EQ(v, i);
      }
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      long switches = switches_of("tpcomm-progress") - before;
      // Parked, it wakes once per linger period (1 ms while the core is contended, more
      // otherwise): 260-390 times over this loop's ~290 ms here. A poll loop that let it
      // sleep on the fds woke it for each arrival: 1970-2040 times.
      EXPECT_LT(switches, kMessages / 2) << "over " << ms << " ms";
    }
    pg->send(Tensor::of(&ack, 1), peer);
    pg->recv(Tensor::of(&ack, 1), peer);
    pg->destroy();
  });
  EXPECT_TRUE(ranks_ok(r));
}

}  // namespace
}  // namespace tpcomm::testing
