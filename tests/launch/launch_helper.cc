// Implementation of tprun_runner.h.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "core/config.h"
#include "launch/launch_internal.h"
#include "launch/tprun_runner.h"

namespace tpcomm::launch::testing {

TempDir::TempDir() {
  char tmpl[] = "/tmp/tprun_test_XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error(std::string("mkdtemp: ") + strerror(errno));
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool wait_for_files(const std::vector<std::string>& paths, std::chrono::milliseconds timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (true) {
    bool all = true;
    for (const auto& p : paths) all = all && file_exists(p);
    if (all) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TprunProcess::TprunProcess(const std::vector<std::string>& args,
                           const std::vector<std::string>& env) {
  std::string bin = TPCOMM_TEST_BIN_DIR "/tprun";
  std::vector<std::string> argv = {bin};
  argv.insert(argv.end(), args.begin(), args.end());
  config::reload();
  std::vector<std::string> envp = detail::merge_env(config::environment(), env);

  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe2: ") + strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  std::vector<char*> a, e;
  for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  for (auto& s : envp) e.push_back(const_cast<char*>(s.c_str()));
  e.push_back(nullptr);
  start_ = std::chrono::steady_clock::now();
  int rc = posix_spawn(&pid_, bin.c_str(), &fa, nullptr, a.data(), e.data());
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  close(err[1]);
  out_ = out[0];
  err_ = err[0];
  if (rc != 0) {
    close(out_);
    close(err_);
    throw std::runtime_error("cannot start " + bin + ": " + strerror(rc));
  }
}

TprunProcess::~TprunProcess() {
  if (!done_) wait(std::chrono::milliseconds(0));
  if (out_ >= 0) close(out_);
  if (err_ >= 0) close(err_);
}

void TprunProcess::signal(int sig) {
  if (!done_) kill(pid_, sig);
}

void TprunProcess::pump(int timeout_ms) {
  pollfd fds[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
  poll(fds, 2, timeout_ms);
  for (int i = 0; i < 2; ++i) {
    int& fd = i == 0 ? out_ : err_;
    if (fd < 0 || !fds[i].revents) continue;
    char buf[65536];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      (i == 0 ? out_text_ : err_text_).append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      close(fd);
      fd = -1;
    }
  }
}

bool TprunProcess::wait_for_stderr(const std::string& part, std::chrono::milliseconds timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (err_text_.find(part) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= until || (out_ < 0 && err_ < 0)) return false;
    pump(20);
  }
  return true;
}

RunResult TprunProcess::wait(std::chrono::milliseconds timeout) {
  RunResult r;
  auto until = std::chrono::steady_clock::now() + timeout;
  bool termed = false, killed = false;
  int status = 0;
  bool exited = false;
  while (true) {
    auto now = std::chrono::steady_clock::now();
    if (!exited && now >= until) {
      // Stop it: SIGTERM first so that tprun takes its workers down, SIGKILL 15 s later.
      if (!termed) {
        r.timed_out = true;
        termed = true;
        kill(pid_, SIGTERM);
        until = now + std::chrono::seconds(15);
      } else if (!killed) {
        killed = true;
        kill(pid_, SIGKILL);
        until = now + std::chrono::seconds(15);
      } else {
        break;
      }
    }
    if (!exited) {
      pid_t p = waitpid(pid_, &status, WNOHANG);
      if (p == pid_) {
        exited = true;
        r.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
        // Output still in the pipes arrives promptly; do not wait on stray holders.
        until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      }
    }
    if (exited && out_ < 0 && err_ < 0) break;
    if (exited && std::chrono::steady_clock::now() >= until) break;
    if (out_ < 0 && err_ < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } else {
      pump(20);
    }
  }
  done_ = true;
  r.out = std::move(out_text_);
  r.err = std::move(err_text_);
  if (!exited) return r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

RunResult run_tprun(const std::vector<std::string>& args, const std::vector<std::string>& env,
                    std::chrono::milliseconds timeout) {
  TprunProcess p(args, env);
  return p.wait(timeout);
}

}  // namespace tpcomm::launch::testing
