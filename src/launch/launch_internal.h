// Pieces of tprun shared by its source files (and unit-tested on their own): worker
// processes, exit statuses, line forwarding of worker output, and the store host.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tpcomm/launch.hpp"

namespace tpcomm {
class TCPStore;
}

namespace tpcomm::launch::detail {

/// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

/// How a process ended.
struct ExitStatus {
  bool signaled = false;
  int code = 0;  ///< exit code, or signal number when signaled
  bool core_dumped = false;

  bool ok() const { return !signaled && code == 0; }
  /// What a shell would report: the exit code, or 128 + signal.
  int shell_status() const { return signaled ? 128 + code : code; }
  /// "exit code 3", "killed by signal 9 (SIGKILL)".
  std::string describe() const;
};

/// "SIGTERM" for 15 (or "signal 15" when unnamed).
std::string signal_name(int sig);

/// Writes all of buf to fd (retrying EINTR; waiting up to a second on EAGAIN). Returns false
/// on an error such as EPIPE; never throws.
bool write_fully(int fd, const char* buf, size_t len);

/// Finds `program` as execvp would: a name with a '/' is taken as is, otherwise it is looked
/// up in `path` (colon-separated). Throws InvalidArgument naming the program and the PATH
/// when it is missing or not executable.
std::string find_program(const std::string& program, const std::string& path);

/// Returns `base` ("NAME=value" strings) with every variable in `overrides` replaced or added.
std::vector<std::string> merge_env(const std::vector<std::string>& base,
                                   const std::vector<std::string>& overrides);

/// The CPUs this process may run on, in increasing order (sched_getaffinity); local rank i
/// of `tprun --bind-to core` gets entry i modulo the count.
std::vector<int> usable_cpus();

/// One running worker: its own process group, stdout/stderr read through pipes.
class Worker {
 public:
  /// Starts `path` with argv and envp in a new process group (tprun's handlers reset,
  /// nothing blocked, killed when tprun dies), its stdout and stderr on fresh non-blocking
  /// pipes; `cpu` >= 0 pins it to that CPU before it runs. Throws Error naming the program
  /// and the rank when it cannot be started (or pinned).
  Worker(int local_rank, int rank, const std::string& path, const std::vector<std::string>& argv,
         const std::vector<std::string>& envp, int cpu = -1);
  /// Kills the process group and reaps the worker if that did not happen yet (bounded).
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  int local_rank() const { return local_rank_; }
  int rank() const { return rank_; }
  pid_t pid() const { return pid_; }

  /// Read ends of the worker's stdout / stderr pipes (-1 once closed).
  UniqueFd& out() { return out_; }
  UniqueFd& err() { return err_; }

  /// Checks, without blocking, whether the worker has exited. The process is left a zombie
  /// until reap() so that its process-group id cannot be reused while tprun still signals it.
  bool check_exit();
  bool exited() const { return exited_; }
  const ExitStatus& status() const { return status_; }

  /// Sends sig to the worker's process group (the worker and everything it started).
  void signal_group(int sig);

  /// Collects the exited worker (or kills and collects it, bounded), so no zombie remains.
  void reap();

 private:
  int local_rank_;
  int rank_;
  pid_t pid_ = -1;
  bool exited_ = false;
  bool reaped_ = false;
  ExitStatus status_;
  UniqueFd out_;
  UniqueFd err_;
};

/// Forwards one worker stream: whole lines, each prefixed, to the console fd; raw bytes to
/// the log file fd. Either may be -1. Lines longer than kMaxLine are cut into pieces.
class LineForwarder {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  LineForwarder(std::string prefix, int console_fd, int file_fd)
      : prefix_(std::move(prefix)), console_fd_(console_fd), file_fd_(file_fd) {}

  /// Takes bytes read from the worker.
  void feed(const char* data, size_t n);
  /// Writes out a partial last line (ended with a newline on the console).
  void finish();

 private:
  void emit(const char* line, size_t n, std::string* out);
  std::string prefix_;
  int console_fd_;
  int file_fd_;
  std::string pending_;
};

/// The job's TCPStore, hosted by tprun on node 0 so that it outlives worker restarts and its
/// port is known before any worker starts.
class StoreHost {
 public:
  /// Listens on host:port (0: a free port). Throws Error naming host:port and what to do.
  StoreHost(const std::string& host, int port, const std::string& job_id);
  ~StoreHost();
  StoreHost(const StoreHost&) = delete;
  StoreHost& operator=(const StoreHost&) = delete;
  /// The bound port.
  int port() const { return port_; }

 private:
  std::unique_ptr<TCPStore> store_;
  int port_ = 0;
};

/// Reaps exited children that are not workers: processes a worker started and left behind,
/// which tprun adopts as a child subreaper. Stops at the first child in `keep` (a worker
/// zombie kept on purpose), or when only live children remain and `until` has passed.
void reap_adopted(const std::vector<pid_t>& keep, std::chrono::milliseconds wait_for);

/// launch(), optionally also reaping adopted orphans (only the tprun program itself does:
/// in another process, other children may not be tprun's to reap).
int run_job(const Options& options, bool adopt_orphans);

/// A random job id (16 hex digits).
std::string random_job_id();

}  // namespace tpcomm::launch::detail
