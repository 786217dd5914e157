// Worker processes of tprun: started with posix_spawn (safe while the store's server thread
// runs), each in its own process group with its stdout/stderr on pipes; watched without
// reaping until tprun is done signalling the group, then reaped.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/log.h"
#include "launch/launch_internal.h"
#include "tpcomm/error.hpp"

namespace tpcomm::launch::detail {

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  if (abbrev) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

std::string ExitStatus::describe() const {
  if (!signaled) return "exit code " + std::to_string(code);
  return "killed by signal " + std::to_string(code) + " (" + signal_name(code) + ")" +
         (core_dumped ? ", core dumped" : "");
}

bool write_fully(int fd, const char* buf, size_t len) {
  int stalls = 0;
  while (len > 0) {
    ssize_t n = ::write(fd, buf, len);
    if (n > 0) {
      buf += n;
      len -= static_cast<size_t>(n);
      stalls = 0;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && stalls++ < 10) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
      continue;
    }
    return false;
  }
  return true;
}

std::string find_program(const std::string& program, const std::string& path) {
  auto runnable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) {
    if (runnable(program)) return program;
    struct stat st {};
    std::string why = ::stat(program.c_str(), &st) != 0 ? strerror(errno)
                      : S_ISDIR(st.st_mode)             ? "it is a directory"
                                                        : "it is not executable";
    throw InvalidArgument("tprun: cannot run '" + program + "': " + why +
                          "; give the path of an executable program");
  }
  std::string dirs = path.empty() ? "/usr/local/bin:/usr/bin:/bin" : path;
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + program;
    if (runnable(candidate)) return candidate;
    start = end + 1;
  }
  throw InvalidArgument("tprun: cannot run '" + program + "': not found in PATH (" + dirs +
                        "); give its full path or fix PATH");
}

std::vector<std::string> merge_env(const std::vector<std::string>& base,
                                   const std::vector<std::string>& overrides) {
  auto name_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  std::vector<std::string> out;
  out.reserve(base.size() + overrides.size());
  for (const std::string& kv : base) {
    std::string name = name_of(kv);
    bool replaced = false;
    for (const std::string& o : overrides)
      if (name_of(o) == name) replaced = true;
    if (!replaced) out.push_back(kv);
  }
  out.insert(out.end(), overrides.begin(), overrides.end());
  return out;
}

namespace {

// A pipe whose read end is non-blocking; both ends close on exec.
void make_pipe(UniqueFd* read_end, UniqueFd* write_end, int rank) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw Error("tprun: cannot create an output pipe for rank " + std::to_string(rank) + ": " +
                strerror(errno) + " (too many open files? raise ulimit -n)");
  read_end->reset(fds[0]);
  write_end->reset(fds[1]);
  int flags = ::fcntl(fds[0], F_GETFL);
  ::fcntl(fds[0], F_SETFL, flags | O_NONBLOCK);
}

// Owns posix_spawn's attribute objects for one call.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
};

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const std::string& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

Worker::Worker(int local_rank, int rank, const std::string& path,
               const std::vector<std::string>& argv, const std::vector<std::string>& envp)
    : local_rank_(local_rank), rank_(rank) {
  UniqueFd out_w, err_w;
  make_pipe(&out_, &out_w, rank);
  make_pipe(&err_, &err_w, rank);

  SpawnSetup s;
  posix_spawn_file_actions_adddup2(&s.actions, out_w.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&s.actions, err_w.get(), STDERR_FILENO);
  posix_spawnattr_setflags(&s.attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&s.attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&s.attr, &none);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE, SIGUSR1, SIGUSR2})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&s.attr, &defaults);

  std::vector<char*> c_argv = c_strings(argv);
  std::vector<char*> c_envp = c_strings(envp);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, path.c_str(), &s.actions, &s.attr, c_argv.data(), c_envp.data());
  if (rc != 0)
    throw Error("tprun: cannot start rank " + std::to_string(rank) + " ('" + path +
                "'): " + strerror(rc));
  pid_ = pid;
  TPLOG(INFO, LAUNCH) << "tprun: started rank " << rank << " (local " << local_rank << ") as pid "
                      << pid << ": " << path;
}

Worker::~Worker() { reap(); }

bool Worker::check_exit() {
  if (exited_) return true;
  siginfo_t info{};
  int rc;
  do {
    rc = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) {
    // Someone else reaped it (cannot happen inside tprun); treat as gone.
    exited_ = reaped_ = true;
    status_ = ExitStatus{true, SIGKILL, false};
    TPLOG(WARN, LAUNCH) << "tprun: waitid(" << pid_ << ") failed: " << strerror(errno);
    return true;
  }
  if (info.si_pid == 0) return false;
  exited_ = true;
  if (info.si_code == CLD_EXITED) {
    status_ = ExitStatus{false, info.si_status, false};
  } else {
    status_ = ExitStatus{true, info.si_status, info.si_code == CLD_DUMPED};
  }
  TPLOG(INFO, LAUNCH) << "tprun: rank " << rank_ << " (pid " << pid_
                      << ") ended: " << status_.describe();
  return true;
}

void Worker::signal_group(int sig) {
  if (pid_ <= 0 || reaped_) return;
  // The group id stays reserved while the (possibly zombie) leader is unreaped.
  if (::kill(-pid_, sig) != 0 && errno != ESRCH) {
    TPLOG(WARN, LAUNCH) << "tprun: kill(-" << pid_ << ", " << signal_name(sig)
                        << ") failed: " << strerror(errno);
  }
}

void Worker::reap() {
  if (pid_ <= 0 || reaped_) return;
  if (!check_exit()) {
    signal_group(SIGKILL);
    for (int i = 0; i < 500 && !check_exit(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!exited_) {
      TPLOG(WARN, LAUNCH) << "tprun: rank " << rank_ << " (pid " << pid_
                          << ") did not die within 5 s of SIGKILL; leaving it";
      return;
    }
  }
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
}

void reap_adopted(const std::vector<pid_t>& keep, std::chrono::milliseconds wait_for) {
  auto until = std::chrono::steady_clock::now() + wait_for;
  while (true) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      if (errno == EINTR) continue;
      return;  // ECHILD: no children at all
    }
    if (info.si_pid == 0) {  // only live children
      if (std::chrono::steady_clock::now() >= until) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    for (pid_t k : keep)
      if (k == info.si_pid) return;
    int st = 0;
    ::waitpid(info.si_pid, &st, WNOHANG);
    TPLOG(INFO, LAUNCH) << "tprun: reaped pid " << info.si_pid << ", left behind by a worker";
  }
}

}  // namespace tpcomm::launch::detail
