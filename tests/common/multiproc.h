// Tier (b) test harness (STYLE.md 14): runs a test body in N forked processes ("ranks") that
// meet through a FileStore (or a TCPStore) in a fresh temporary directory. Every child is
// bounded by a timeout and reaped; on timeout all remaining children are killed. gtest
// failures and exceptions inside a child are sent back and reported per rank.
//
//   auto r = tpcomm::testing::run_ranks(4, [](tpcomm::testing::RankContext& c) {
//     auto pg = tpcomm::ProcessGroup::create(c.store, c.rank, c.world_size);
//     ...EXPECT_EQ(...)...
//   });
//   EXPECT_RANKS_OK(r);
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "core/log.h"
#include "tpcomm/store.hpp"

namespace tpcomm::testing {

/// What each rank's body receives.
struct RankContext {
  int rank = 0;
  int world_size = 1;
  std::shared_ptr<Store> store;
  std::string dir;  ///< the run's temporary directory (removed afterwards)
};

struct RunOptions {
  std::chrono::milliseconds timeout{120000};
  /// Environment variables set in every child before the body runs (then config::reload()).
  std::map<std::string, std::string> env;
  /// Per-rank additions, e.g. a different TPCOMM_HOSTID per rank.
  std::function<std::map<std::string, std::string>(int rank)> rank_env;
  /// Meet through a TCPStore served by the parent instead of a FileStore.
  bool tcp_store = false;
  /// Ranks expected to die (killed by the test itself): their exit is not a failure.
  std::vector<int> may_die;
};

struct RankResult {
  int rank = 0;
  bool ok = false;
  bool timed_out = false;
  int exit_code = -1;
  int signal = 0;
  std::string output;  ///< failure messages sent back by the child
};

namespace detail {

// Sends every gtest failure of the child through the pipe.
class PipeReporter : public ::testing::EmptyTestEventListener {
 public:
  explicit PipeReporter(int fd) : fd_(fd) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    failed_ = true;
    std::ostringstream os;
    os << (r.file_name() ? r.file_name() : "?") << ":" << r.line_number() << ": " << r.summary()
       << "\n";
    write_all(os.str());
  }
  void write_all(const std::string& s) {
    const char* p = s.data();
    size_t left = s.size();
    while (left > 0) {
      ssize_t n = ::write(fd_, p, left);
      if (n <= 0) return;
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  bool failed() const { return failed_; }

 private:
  int fd_;
  bool failed_ = false;
};

inline void remove_tree(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (d) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      std::string p = path + "/" + n;
      struct stat st;
      if (lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        remove_tree(p);
      else
        unlink(p.c_str());
    }
    closedir(d);
  }
  rmdir(path.c_str());
}

/// Forks a process serving a TCPStore on 127.0.0.1 (port 0) until killed; returns its pid and
/// sets *port, or -1 (port 0: the ranks' stores then fail, naming the address) on failure.
inline pid_t start_store_server(std::chrono::milliseconds timeout, uint16_t* port) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    ::close(fds[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    try {
      TCPStoreOptions so;
      so.is_master = true;
      so.wait_for_workers = false;
      so.server_only = true;
      so.timeout = timeout;
      TCPStore server("127.0.0.1", 0, so);
      uint16_t p = server.port();
      if (::write(fds[1], &p, sizeof p) != static_cast<ssize_t>(sizeof p)) _exit(3);
      ::close(fds[1]);
      for (;;) pause();
    } catch (...) {
      _exit(3);
    }
  }
  ::close(fds[1]);
  uint16_t p = 0;
  if (pid > 0) {
    pollfd pf{fds[0], POLLIN, 0};
    if (::poll(&pf, 1, 30000) <= 0 ||
        ::read(fds[0], &p, sizeof p) != static_cast<ssize_t>(sizeof p)) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      pid = -1;
      p = 0;
    }
  }
  ::close(fds[0]);
  *port = p;
  return pid;
}

}  // namespace detail

/// Creates the store a child uses (defined inline below; FileStore or TCPStore client).
inline std::shared_ptr<Store> make_child_store(const RunOptions& opt, const std::string& dir,
                                               int world_size, uint16_t port);

/// Forks `n` ranks running `body` and waits for them (bounded). Never throws.
inline std::vector<RankResult> run_ranks(int n, const std::function<void(RankContext&)>& body,
                                         const RunOptions& opt = {}) {
  char tmpl[] = "/tmp/tpcomm-test-XXXXXX";
  std::string dir = mkdtemp(tmpl) ? tmpl : "/tmp";
  // The TCPStore server runs in a process of its own, so that this process has no other
  // thread when it forks the ranks: a child forked while the server's thread was inside the
  // dynamic linker (a first call through the PLT) inherited its thread-scope flag, and the
  // first thread the child made reused that descriptor with the flag still set: every
  // dlclose in the child (hwloc's plugins) then waited for it forever (stacks in
  // __thread_gscope_wait; P2P/Semantics.OverTcpStore/ucx under load).
  pid_t server_pid = -1;
  uint16_t port = 0;
  if (opt.tcp_store) server_pid = detail::start_store_server(opt.timeout, &port);
  std::vector<pid_t> pids(n, -1);
  std::vector<int> pipes(n, -1);
  std::vector<RankResult> results(n);
  std::fflush(nullptr);
  for (int r = 0; r < n; ++r) {
    results[r].rank = r;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      results[r].output = "pipe2 failed";
      continue;
    }
    pid_t pid = fork();
    if (pid == 0) {
      ::close(fds[0]);
      // Die with the parent, so that nothing outlives a crashed test program.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      auto* rep = new detail::PipeReporter(fds[1]);
      ::testing::UnitTest::GetInstance()->listeners().Append(rep);
      int code = 0;
      try {
        // Flight recorder dumps of failing tests go to the run's directory (removed after).
        setenv("TPCOMM_FLIGHT_RECORDER_DIR", (dir + "/trace").c_str(), 1);
        for (auto& [k, v] : opt.env) setenv(k.c_str(), v.c_str(), 1);
        if (opt.rank_env)
          for (auto& [k, v] : opt.rank_env(r)) setenv(k.c_str(), v.c_str(), 1);
        config::reload();
        log::reload();
        RankContext ctx;
        ctx.rank = r;
        ctx.world_size = n;
        ctx.dir = dir;
        ctx.store = make_child_store(opt, dir, n, port);
        body(ctx);
      } catch (const std::exception& e) {
        rep->write_all(std::string("rank ") + std::to_string(r) + " threw: " + e.what() + "\n");
        code = 2;
      } catch (...) {
        rep->write_all("rank " + std::to_string(r) + " threw a non-std exception\n");
        code = 2;
      }
      if (rep->failed() && code == 0) code = 1;
      std::fflush(nullptr);
      _exit(code);
    }
    ::close(fds[1]);
    pids[r] = pid;
    pipes[r] = fds[0];
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
  }
  auto drain = [&](int r) {
    char buf[4096];
    ssize_t k;
    while (pipes[r] >= 0 && (k = ::read(pipes[r], buf, sizeof buf)) > 0)
      results[r].output.append(buf, static_cast<size_t>(k));
  };
  auto deadline = std::chrono::steady_clock::now() + opt.timeout;
  int left = 0;
  for (pid_t p : pids) left += p > 0;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (pids[r] <= 0) continue;
      drain(r);
      int st = 0;
      pid_t w = waitpid(pids[r], &st, WNOHANG);
      if (w == pids[r]) {
        drain(r);
        if (WIFEXITED(st)) results[r].exit_code = WEXITSTATUS(st);
        if (WIFSIGNALED(st)) results[r].signal = WTERMSIG(st);
        results[r].ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        pids[r] = -1;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < n; ++r) {
        if (pids[r] <= 0) continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
        drain(r);
        results[r].timed_out = true;
        results[r].output += "rank " + std::to_string(r) + " timed out after " +
                             std::to_string(opt.timeout.count()) + " ms and was killed\n";
        pids[r] = -1;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int fd : pipes)
    if (fd >= 0) ::close(fd);
  for (int r : opt.may_die)
    if (r >= 0 && r < n && !results[r].timed_out) results[r].ok = true;
  if (server_pid > 0) {
    kill(server_pid, SIGKILL);
    waitpid(server_pid, nullptr, 0);
  }
  detail::remove_tree(dir);
  return results;
}

/// A gtest assertion over run_ranks' results: each failed rank is reported with its output.
inline ::testing::AssertionResult ranks_ok(const std::vector<RankResult>& results) {
  std::ostringstream os;
  bool ok = true;
  for (const RankResult& r : results) {
    if (r.ok) continue;
    ok = false;
    os << "\n--- rank " << r.rank << ": "
       << (r.timed_out ? std::string("timed out")
           : r.signal  ? "killed by signal " + std::to_string(r.signal)
                       : "exit code " + std::to_string(r.exit_code))
       << "\n"
       << r.output;
  }
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "some ranks failed:" << os.str();
}

#define EXPECT_RANKS_OK(results) EXPECT_TRUE(::tpcomm::testing::ranks_ok(results))
#define ASSERT_RANKS_OK(results) ASSERT_TRUE(::tpcomm::testing::ranks_ok(results))

inline std::shared_ptr<Store> make_child_store(const RunOptions& opt, const std::string& dir,
                                               int world_size, uint16_t port) {
  std::shared_ptr<Store> s;
  if (opt.tcp_store)
    s = std::make_shared<TCPStore>("127.0.0.1", port, -1, false, opt.timeout, false);
  else
    s = std::make_shared<FileStore>(dir + "/store", -1);
  s->set_timeout(opt.timeout);
  return s;
}

}  // namespace tpcomm::testing
