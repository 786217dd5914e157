// Worker processes of tprun: forked and exec'd (the child runs only async-signal-safe code:
// tprun has threads), each in its own process group with its stdout/stderr on pipes, killed
// if tprun dies; watched without reaping until tprun is done signalling the group, then reaped.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
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

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const std::string& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// In the forked child, before execve: async-signal-safe calls only (tprun has threads, the
// store's server among them). Never returns.
[[noreturn]] void exec_child(pid_t parent, int out_w, int err_w, int report_w, const char* path,
                             char* const* argv, char* const* envp, const cpu_set_t* cpus) {
  ::setpgid(0, 0);  // its own group: tprun signals the worker and all it starts
  if (cpus != nullptr && ::sched_setaffinity(0, sizeof(cpu_set_t), cpus) != 0) {
    int e = -errno;  // negative: the pinning failed, not the exec
    ssize_t n = ::write(report_w, &e, sizeof(e));
    (void)n;
    ::_exit(127);
  }
  // If tprun dies (even by SIGKILL), the worker goes too rather than running on unsupervised.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
  // tprun's handlers must not run here; ignored signals stay ignored (nohup), except SIGPIPE,
  // which only tprun ignores.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) {
    struct sigaction cur {};
    ::sigaction(sig, nullptr, &cur);
    if (cur.sa_handler != SIG_IGN) ::sigaction(sig, &dfl, nullptr);
  }
  ::sigaction(SIGPIPE, &dfl, nullptr);
  ::dup2(out_w, STDOUT_FILENO);
  ::dup2(err_w, STDERR_FILENO);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(path, argv, envp);
  int e = errno;
  ssize_t n = ::write(report_w, &e, sizeof(e));
  (void)n;
  ::_exit(127);
}

// A pipe fd below 3 would be clobbered by the child's dup2 onto stdout/stderr.
int above_stdio(int fd) {
  if (fd > STDERR_FILENO) return fd;
  int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  ::close(fd);
  return moved;
}

}  // namespace

std::vector<int> usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

Worker::Worker(int local_rank, int rank, const std::string& path,
               const std::vector<std::string>& argv, const std::vector<std::string>& envp, int cpu)
    : local_rank_(local_rank), rank_(rank) {
  cpu_set_t pin;
  CPU_ZERO(&pin);
  if (cpu >= 0) CPU_SET(cpu, &pin);
  UniqueFd out_w, err_w, report_r, report_w;
  make_pipe(&out_, &out_w, rank);
  make_pipe(&err_, &err_w, rank);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw Error("tprun: cannot create a pipe for rank " + std::to_string(rank) + ": " +
                strerror(errno));
  report_r.reset(fds[0]);
  report_w.reset(above_stdio(fds[1]));
  out_w.reset(above_stdio(out_w.release()));
  err_w.reset(above_stdio(err_w.release()));

  std::vector<char*> c_argv = c_strings(argv);
  std::vector<char*> c_envp = c_strings(envp);
  pid_t parent = ::getpid();
  // No handler may run in the child before it resets them.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = ::fork();
  if (pid == 0)
    exec_child(parent, out_w.get(), err_w.get(), report_w.get(), path.c_str(), c_argv.data(),
               c_envp.data(), cpu >= 0 ? &pin : nullptr);
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0)
    throw Error("tprun: cannot start rank " + std::to_string(rank) +
                ": fork failed: " + strerror(fork_errno));
  ::setpgid(pid, pid);  // also from here, so no signal can precede the child's own call
  report_w.reset();
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(report_r.get(), &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  if (n > 0) {  // execve failed; the child has exited
    int st;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (child_errno < 0)
      throw Error("tprun: cannot pin rank " + std::to_string(rank) + " to CPU " +
                  std::to_string(cpu) + " (--bind-to core): " + strerror(-child_errno));
    throw Error("tprun: cannot start rank " + std::to_string(rank) + " ('" + path +
                "'): " + strerror(child_errno));
  }
  pid_ = pid;
  TPLOG(INFO, LAUNCH) << "tprun: started rank " << rank << " (local " << local_rank << ") as pid "
                      << pid << (cpu >= 0 ? " on CPU " + std::to_string(cpu) : std::string())
                      << ": " << path;
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
