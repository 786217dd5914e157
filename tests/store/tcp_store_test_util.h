// Helpers of the TCPStore tests: raw connections that speak (or break) the wire protocol,
// and the tpstore program run as a child process.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "core/deadline.h"
#include "net/socket.h"
#include "store/tcp_store_wire.h"

extern char** environ;

namespace tpcomm::testing {

using namespace std::chrono_literals;

/// Sets an environment variable for the scope of a test and re-reads the registry.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value.c_str(), 1);
    config::reload();
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
    config::reload();
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

/// A raw, blocking connection for sending hand-made frames.
struct RawConn {
  net::Fd fd;
  std::vector<uint8_t> rbuf;

  explicit RawConn(uint16_t port) {
    fd = net::connect_to("127.0.0.1", port, Deadline::after(10s), 5ms);
  }
  void send_bytes(const void* p, size_t n) {
    net::write_all(fd.get(), p, n, Deadline::after(10s), "test server");
  }
  void send_bytes(const std::vector<uint8_t>& b) { send_bytes(b.data(), b.size()); }

  // Sends a HELLO of `job` and expects HELLO_OK.
  void hello(const std::string& job = "default") {
    std::vector<uint8_t> b;
    store_wire::Writer w(&b);
    w.begin(store_wire::Op::kHello, 1);
    w.str(job);
    w.str("raw-test");
    w.u32(0);
    w.end();
    send_bytes(b);
    auto f = read_frame();
    ASSERT_EQ(f.op, static_cast<uint8_t>(store_wire::Op::kHelloOk)) << f.text;
  }

  // One decoded reply frame (text = error message or "").
  struct Frame {
    uint8_t op = 0;
    uint32_t id = 0;
    int64_t integer = 0;
    uint16_t code = 0;
    std::string text;
    std::string value;
    bool eof = false;
  };

  // Reads bytes until one whole frame is in; eof=true when the server closed first.
  Frame read_frame(std::chrono::milliseconds timeout = 10s) {
    Deadline d = Deadline::after(timeout);
    store_wire::Limits lim;
    lim.max_value = uint64_t{1} << 40;
    while (true) {
      store_wire::Header h;
      auto st = store_wire::decode_header(rbuf.data(), rbuf.size(), lim, &h);
      if (st == store_wire::HeaderStatus::kOk &&
          rbuf.size() >= store_wire::kHeaderSize + h.length) {
        store_wire::Reply r;
        std::string err;
        Frame f;
        EXPECT_TRUE(store_wire::decode_reply(h, rbuf.data() + store_wire::kHeaderSize, &r, &err))
            << err;
        f.op = r.op;
        f.id = r.id;
        f.integer = r.integer;
        f.code = static_cast<uint16_t>(r.code);
        f.text = std::string(r.message);
        f.value = std::string(r.value.begin(), r.value.end());
        rbuf.erase(rbuf.begin(), rbuf.begin() + store_wire::kHeaderSize + h.length);
        return f;
      }
      EXPECT_TRUE(st == store_wire::HeaderStatus::kOk || st == store_wire::HeaderStatus::kNeedMore)
          << "bad reply header, status " << static_cast<int>(st);
      uint8_t tmp[65536];
      pollfd p{fd.get(), POLLIN, 0};
      int rc = ::poll(&p, 1, d.poll_timeout_ms());
      if (rc <= 0) {
        ADD_FAILURE() << "no reply within " << timeout.count() << " ms";
        return Frame{};
      }
      ssize_t n = ::recv(fd.get(), tmp, sizeof(tmp), 0);
      if (n <= 0) {
        Frame f;
        f.eof = true;
        return f;
      }
      rbuf.insert(rbuf.end(), tmp, tmp + n);
    }
  }

  // True when the server closes the connection within the timeout (all data read away).
  bool closed_by_server(std::chrono::milliseconds timeout = 10s) {
    Deadline d = Deadline::after(timeout);
    uint8_t tmp[4096];
    while (!d.expired()) {
      pollfd p{fd.get(), POLLIN, 0};
      if (::poll(&p, 1, d.poll_timeout_ms()) <= 0) return false;
      ssize_t n = ::recv(fd.get(), tmp, sizeof(tmp), 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
      if (n > 0) rbuf.insert(rbuf.end(), tmp, tmp + n);
    }
    return false;
  }
};

/// Encodes one request frame with the given op and raw payload.
inline std::vector<uint8_t> frame(store_wire::Op op, uint32_t id,
                                  const std::vector<std::string>& fields, int64_t i = 0,
                                  bool with_int = false) {
  std::vector<uint8_t> b;
  store_wire::Writer w(&b);
  w.begin(op, id);
  for (const auto& f : fields) w.str(f);
  if (with_int) w.i64(i);
  w.end();
  return b;
}

/// The tpstore program running as a child process; killed and reaped on destruction.
class TpstoreProcess {
 public:
  explicit TpstoreProcess(const std::vector<std::string>& extra = {}) {
    std::string bin = std::string(TPCOMM_TEST_BIN_DIR) + "/tpstore";
    std::vector<std::string> args = {bin, "--host", "127.0.0.1", "--port", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int pipefd[2];
    if (::pipe2(pipefd, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
    posix_spawn_file_actions_addclose(&fa, pipefd[0]);
    int rc = posix_spawn(&pid_, bin.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(pipefd[1]);
    out_.reset(pipefd[0]);
    if (rc != 0) {
      pid_ = -1;
      return;
    }
    std::string line = read_line(30s);
    const std::string prefix = "tpstore listening on ";
    if (line.rfind(prefix, 0) == 0) {
      port_ = static_cast<uint16_t>(std::atoi(line.substr(line.rfind(':') + 1).c_str()));
    }
  }
  ~TpstoreProcess() { kill_and_wait(SIGKILL); }

  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }

  // Reads one line of the child's stdout ("" at EOF or timeout).
  std::string read_line(std::chrono::milliseconds timeout) {
    Deadline d = Deadline::after(timeout);
    std::string line;
    char c;
    while (!d.expired()) {
      pollfd p{out_.get(), POLLIN, 0};
      if (::poll(&p, 1, d.poll_timeout_ms()) <= 0) break;
      if (::read(out_.get(), &c, 1) != 1) break;
      if (c == '\n') return line;
      line += c;
    }
    return line;
  }

  // Sends sig and reaps the child (SIGKILL after 10 s); returns the wait status.
  int kill_and_wait(int sig) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    int status = 0;
    for (int i = 0; i < 1000; ++i) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      std::this_thread::sleep_for(10ms);
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  uint16_t port_ = 0;
  net::Fd out_;
};

/// Raises the soft RLIMIT_NOFILE to the hard one; returns the resulting soft limit.
inline rlim_t raise_fd_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
    ::getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur;
}

}  // namespace tpcomm::testing
