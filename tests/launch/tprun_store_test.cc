// Workers reach the TCPStore that tprun hosts on node 0, and it outlives a worker restart.
// The worker is this very program, started by tprun with --store-worker (see main below).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>

#include "core/config.h"
#include "launch/tprun_runner.h"
#include "tpcomm/rendezvous.hpp"
#include "tpcomm/store.hpp"

namespace tpcomm::launch {
namespace {

namespace lt = tpcomm::launch::testing;

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Run by tprun in each worker. Attempt 0: all ranks meet, rank 0 leaves a key and fails.
// Attempt 1 (after tprun's restart): every rank reads that key back and succeeds.
int store_worker() {
  try {
    config::reload();
    int rank = static_cast<int>(config::get_int("RANK"));
    int world = static_cast<int>(config::get_int("WORLD_SIZE"));
    int attempt = static_cast<int>(config::get_int("TPCOMM_RESTART_COUNT"));
    TCPStoreOptions opts;
    opts.timeout = std::chrono::seconds(60);
    TCPStore store(config::get_string("MASTER_ADDR"),
                   static_cast<uint16_t>(config::get_int("MASTER_PORT")), opts);
    std::string tag = "attempt" + std::to_string(attempt) + "/rank";
    store.set(tag + std::to_string(rank), "here");
    std::vector<std::string> all;
    for (int r = 0; r < world; ++r) all.push_back(tag + std::to_string(r));
    store.wait(all, std::chrono::seconds(60));
    std::cout << "rank " << rank << " met " << world << " ranks in attempt " << attempt
              << std::endl;
    if (attempt == 0) {
      if (rank == 0) {
        store.set("survivor", "written in attempt 0");
        return 7;
      }
      store.wait({"never"}, std::chrono::seconds(60));  // tprun stops us first
      return 1;
    }
    std::cout << "rank " << rank << " read: " << store.get_string("survivor") << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "store worker failed: " << e.what() << std::endl;
    return 1;
  }
}

// Run by tprun in each worker: env:// rendezvous (every rank a client of tprun's store, as
// TPCOMM_USE_AGENT_STORE says), then all ranks meet through the store.
int rdzv_worker() {
  try {
    config::reload();
    RendezvousResult r = rendezvous("env://", -1, -1, std::chrono::seconds(60));
    r.store->set("joined/" + std::to_string(r.rank), "yes");
    std::vector<std::string> all;
    for (int i = 0; i < r.world_size; ++i) all.push_back("joined/" + std::to_string(i));
    r.store->wait(all, std::chrono::seconds(60));
    int64_t n = r.store->add("count", 1);
    std::cout << "rank " << r.rank << " of " << r.world_size << " joined via env:// (add -> "
              << (n >= 1 && n <= r.world_size ? "ok" : "bad") << ")" << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "rdzv worker failed: " << e.what() << std::endl;
    return 1;
  }
}

TEST(TprunStore, EnvRendezvousReachesTheStoreTprunHosts) {
  lt::RunResult r =
      lt::run_tprun({"--standalone", "--nproc-per-node", "3", self_exe(), "--rdzv-worker"}, {},
                    std::chrono::seconds(120));
  std::string all = "status " + std::to_string(r.status) + "\n" + r.out + r.err;
  EXPECT_EQ(r.status, 0) << all;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_TRUE(lt::contains(r.out, "[rank " + std::to_string(rank) + "]: rank " +
                                        std::to_string(rank) +
                                        " of 3 joined via env:// (add -> ok)"))
        << all;
}

TEST(TprunStore, WorkersUseTheStoreHostedByTprunAcrossRestarts) {
  lt::RunResult r = lt::run_tprun({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                                   self_exe(), "--store-worker"},
                                  {}, std::chrono::seconds(120));
  std::string all = "status " + std::to_string(r.status) + "\n" + r.out + r.err;
  EXPECT_EQ(r.status, 0) << all;
  EXPECT_TRUE(lt::contains(r.out, "[rank 0]: rank 0 met 2 ranks in attempt 0")) << all;
  EXPECT_TRUE(lt::contains(r.out, "[rank 1]: rank 1 met 2 ranks in attempt 1")) << all;
  EXPECT_TRUE(lt::contains(r.out, "[rank 0]: rank 0 read: written in attempt 0")) << all;
  EXPECT_TRUE(lt::contains(r.out, "[rank 1]: rank 1 read: written in attempt 0")) << all;
  EXPECT_TRUE(lt::contains(r.err, "tprun: rank 0 (local 0, pid ")) << all;
  EXPECT_TRUE(lt::contains(r.err,
                           "failed: exit code 7; stopped the other worker; restarting all "
                           "2 workers of this node (restart 1 of 1)"))
      << all;
}

}  // namespace
}  // namespace tpcomm::launch

// gtest's main, unless tprun started this program as a worker.
int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--store-worker") return tpcomm::launch::store_worker();
  if (argc >= 2 && std::string(argv[1]) == "--rdzv-worker") return tpcomm::launch::rdzv_worker();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
