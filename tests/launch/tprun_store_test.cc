// Workers reach the TCPStore that tprun hosts on node 0, and it outlives a worker restart.
// The worker is this very program, started by tprun with --store-worker (see main below).
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/config.h"
#include "launch/tprun_runner.h"
#include "tpcomm/rendezvous.hpp"
#include "tpcomm/store.hpp"
#include "tpcomm/tpcomm.hpp"

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

// Run by tprun in each worker: init_process_group over env:// (rank 1 a second late, so that
// tprun's progress line has something to wait for), then a line of output.
int init_worker() {
  try {
    config::reload();
    int rank = static_cast<int>(config::get_int("RANK"));
    if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(1));
    init_process_group({.backend = "auto", .init_method = "env://"});
    barrier();
    std::cout << "rank " << rank << " up" << std::endl;
    destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "init worker failed: " << e.what() << std::endl;
    return 1;
  }
}

// bin/tprun with stdout and stderr on one pseudo-terminal (on_tty) or one pipe: what it wrote
// and its exit status. Bounded: killed after 120 s.
std::pair<std::string, int> tprun_console(bool on_tty, const std::vector<std::string>& args) {
  std::string bin = std::string(TPCOMM_TEST_BIN_DIR) + "/tprun";
  std::vector<std::string> copy = args;
  std::vector<char*> argv = {bin.data()};
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2] = {-1, -1};
  if (on_tty ? openpty(&fds[0], &fds[1], nullptr, nullptr, nullptr) != 0 : pipe(fds) != 0)
    return {"cannot make a terminal or pipe", -1};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::string got;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    char buf[4096];
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;  // EOF (pipe) or EIO (terminal: tprun closed it)
    got.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int st = 0;
  if (waitpid(pid, &st, WNOHANG) == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
  }
  return {got, WIFEXITED(st) ? WEXITSTATUS(st) : -1};
}

TEST(TprunStore, WaitForRanksShowsProgressOnlyOnATerminal) {
  std::vector<std::string> args = {"--standalone", "--nproc-per-node", "2", self_exe(),
                                   "--init-worker"};
  auto [tty, tty_status] = tprun_console(true, args);
  EXPECT_EQ(tty_status, 0) << tty;
  const std::string line = "\rtprun: waiting for ranks: ";
  EXPECT_TRUE(lt::contains(tty, line + "0/2 in init_process_group (") ||
              lt::contains(tty, line + "1/2 in init_process_group ("))
      << tty;
  // Cleared once every rank joined, and before any worker line reaches the terminal.
  size_t last = tty.rfind(line);
  ASSERT_NE(last, std::string::npos);
  size_t drawn_end = tty.find("\033[K", last);
  ASSERT_NE(drawn_end, std::string::npos) << tty;
  EXPECT_NE(tty.find("\r\033[K", drawn_end + 3), std::string::npos) << "never cleared:\n" << tty;
  for (size_t at = tty.find("[rank "); at != std::string::npos; at = tty.find("[rank ", at + 1))
    EXPECT_TRUE(at == 0 || tty[at - 1] == '\n' || tty.compare(at - 4, 4, "\r\033[K") == 0)
        << "a worker line behind the progress line:\n"
        << tty;
  EXPECT_TRUE(lt::contains(tty, "[rank 0]: rank 0 up")) << tty;
  EXPECT_TRUE(lt::contains(tty, "[rank 1]: rank 1 up")) << tty;
  auto [piped, piped_status] = tprun_console(false, args);
  EXPECT_EQ(piped_status, 0) << piped;
  EXPECT_FALSE(lt::contains(piped, "waiting for ranks")) << piped;
  EXPECT_FALSE(lt::contains(piped, "\r")) << piped;
  EXPECT_TRUE(lt::contains(piped, "[rank 1]: rank 1 up")) << piped;
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
  if (argc >= 2 && std::string(argv[1]) == "--init-worker") return tpcomm::launch::init_worker();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
