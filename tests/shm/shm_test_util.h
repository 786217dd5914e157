// Shared helpers of the shm transport tests: a recording event sink, transport creation with
// settings from the environment, pumping progress until a condition holds, forked children,
// and the /dev/shm check that runs after every test.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/transport_test_util.h"
#include "core/config.h"
#include "tpcomm/error.hpp"
#include "tpcomm/transport/transport.hpp"

namespace tpcomm::transport::shm_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using test_util::pump;
using test_util::set_env;
using test_util::Sink;

inline TransportContext make_ctx(int rank, int world, const std::string& job = "shm-test") {
  return test_util::make_ctx(rank, world, job);
}

inline std::unique_ptr<Transport> make_shm(int rank, int world,
                                           const std::string& job = "shm-test") {
  return create_transport("shm", make_ctx(rank, world, job));
}

/// Connects a (rank ra) and b (rank rb) both ways and waits until both endpoints are ready.
inline std::pair<Endpoint*, Endpoint*> connect_pair(Transport& a, Sink& sa, int ra, Transport& b,
                                                    Sink& sb, int rb) {
  auto deadline = Clock::now() + 20s;
  Endpoint& ab = a.connect(rb, b.address(), deadline);
  Endpoint& ba = b.connect(ra, a.address(), deadline);
  bool ok = pump({{&a, &sa}, {&b, &sb}}, [&] { return ab.ready() && ba.ready(); });
  EXPECT_TRUE(ok) << "shm pair did not connect";
  return {&ab, &ba};
}

/// Names in /dev/shm that look like ours (we never create any: rings are unnamed files).
inline std::set<std::string> dev_shm_entries() {
  std::set<std::string> out;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.find("tpcomm") != std::string::npos || n.find("shm-test") != std::string::npos) {
        out.insert(n);
      }
    }
    ::closedir(d);
  }
  return out;
}

/// Every shm test derives from this: it restores the variables the test changed and checks
/// that /dev/shm holds no tpcomm file afterwards.
class ShmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!has_transport("shm")) GTEST_SKIP() << "shm transport not built";
    before_ = dev_shm_entries();
  }
  void TearDown() override {
    for (const char* v :
         {"TPCOMM_SHM_RING_SIZE", "TPCOMM_SHM_CMA", "TPCOMM_SHM_DIR", "TPCOMM_SHM_PUT_CHUNK",
          "TPCOMM_SHM_SHARED_MIN", "TPCOMM_SHM_STAGE_SIZE", "TPCOMM_SHM_STAGE_CHUNK",
          "TPCOMM_SHM_STAGE_MIN", "TPCOMM_SHM_STAGE_PULL", "TPCOMM_SHM_STAGE_STORES", "TPCOMM_DEBUG", "TPCOMM_DEBUG_FILE", "TPCOMM_DEBUG_SUBSYS"}) {
      ::unsetenv(v);
    }
    config::reload();
    std::set<std::string> after = dev_shm_entries();
    for (const std::string& n : after) {
      EXPECT_TRUE(before_.count(n)) << "file left in /dev/shm: " << n;
    }
  }
  std::set<std::string> before_;
};

/// Runs fn in a forked child that exits 0 when fn returns true, 1 otherwise (or on throw).
inline pid_t spawn(const std::function<bool()>& fn) {
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 1;
    try {
      rc = fn() ? 0 : 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d: %s\n", ::getpid(), e.what());
    } catch (...) {
    }
    ::_exit(rc);
  }
  return pid;
}

/// Waits for pid up to `timeout`, then kills it; returns the wait status.
inline int reap(pid_t pid, std::chrono::milliseconds timeout = 60s) {
  auto end = Clock::now() + timeout;
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (Clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "child " << pid << " did not finish in time; killed";
      return status;
    }
    std::this_thread::sleep_for(2ms);
  }
}

/// A pipe pair for exchanging addresses with a child; every read has a deadline.
struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() { EXPECT_EQ(::pipe(fd), 0); }
  ~Pipe() {
    for (int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
  void write_blob(const std::vector<uint8_t>& b) {
    uint32_t n = static_cast<uint32_t>(b.size());
    ASSERT_EQ(::write(fd[1], &n, 4), 4);
    if (n) {
      ASSERT_EQ(::write(fd[1], b.data(), n), static_cast<ssize_t>(n));
    }
  }
  // Reads one blob; empty on EOF or timeout.
  std::vector<uint8_t> read_blob(std::chrono::milliseconds timeout = 20s);
};

inline bool read_exact(int fd, void* buf, size_t len, Clock::time_point end) {
  auto* p = static_cast<uint8_t*>(buf);
  while (len > 0) {
    if (Clock::now() > end) return false;
    pollfd pf{fd, POLLIN, 0};
    if (::poll(&pf, 1, 10) <= 0) continue;
    ssize_t n = ::read(fd, p, len);
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

inline std::vector<uint8_t> Pipe::read_blob(std::chrono::milliseconds timeout) {
  auto end = Clock::now() + timeout;
  uint32_t n = 0;
  if (!read_exact(fd[0], &n, 4, end) || n > (1u << 20)) return {};
  std::vector<uint8_t> b(n);
  if (n && !read_exact(fd[0], b.data(), n, end)) return {};
  return b;
}

/// Deterministic test bytes.
inline uint8_t pattern(uint64_t seed, size_t i) {
  return static_cast<uint8_t>((seed * 131 + i * 7 + (i >> 8) * 13) & 0xff);
}

}  // namespace tpcomm::transport::shm_test
