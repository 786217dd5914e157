// Runs a shell command line for tests of the command-line tools: stdout and stderr together,
// bounded by timeout(1) so a tool that hangs fails the test instead of stalling the suite.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace tpcomm::testing {

struct ShellResult {
  int status = -1;  ///< exit code, or 128 + signal
  std::string out;  ///< stdout and stderr together
};

/// `bash -c cmd`, killed after `seconds` (SIGTERM, then SIGKILL 5 s later). `cmd` must not
/// contain a single quote.
inline ShellResult run_shell(const std::string& cmd, int seconds = 120) {
  ShellResult r;
  std::string full = "timeout -k 5 " + std::to_string(seconds) + " bash -c '" + cmd + "' 2>&1";
  FILE* f = popen(full.c_str(), "r");
  if (!f) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) r.out.append(buf, n);
  int st = pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

/// True when `s` contains `part`.
inline bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace tpcomm::testing
