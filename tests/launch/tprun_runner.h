// Test helpers for tprun: run bin/tprun as a child with captured stdout/stderr and bounded
// waits, and a temporary directory that is removed afterwards.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace tpcomm::launch::testing {

/// A fresh directory under /tmp, removed (with its contents) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  /// path()/name
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// Contents of a file ("" if it does not exist).
std::string read_file(const std::string& path);
bool file_exists(const std::string& path);
/// Waits (bounded) until every path exists; returns whether they all did.
bool wait_for_files(const std::vector<std::string>& paths, std::chrono::milliseconds timeout);

/// How a tprun run ended.
struct RunResult {
  int status = -1;  ///< exit code, or 128 + signal
  bool timed_out = false;
  std::string out;
  std::string err;
  double seconds = 0;  ///< from start to exit
};

/// bin/tprun running as a child of the test.
class TprunProcess {
 public:
  /// Starts TPCOMM_TEST_BIN_DIR/tprun with args; env entries ("NAME=value") are added to
  /// (or replace those of) the test's own environment.
  explicit TprunProcess(const std::vector<std::string>& args,
                        const std::vector<std::string>& env = {});
  /// Stops it (SIGTERM, then SIGKILL) and reaps it if wait() did not.
  ~TprunProcess();
  TprunProcess(const TprunProcess&) = delete;
  TprunProcess& operator=(const TprunProcess&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig);
  /// Reads tprun's output until its stderr contains `part` (true) or the timeout passes.
  bool wait_for_stderr(const std::string& part, std::chrono::milliseconds timeout);
  /// Collects output until tprun exits. Past the timeout, tprun gets SIGTERM (so it stops
  /// its workers), then SIGKILL; timed_out is set.
  RunResult wait(std::chrono::milliseconds timeout = std::chrono::seconds(60));

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  int err_ = -1;
  bool done_ = false;
  std::string out_text_;  // read so far
  std::string err_text_;
  void pump(int timeout_ms);
  std::chrono::steady_clock::time_point start_;
};

/// Runs tprun to completion.
RunResult run_tprun(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                    std::chrono::milliseconds timeout = std::chrono::seconds(60));

/// True when `text` contains `part`.
inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace tpcomm::launch::testing
