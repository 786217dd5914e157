// tpbench's progress on a terminal: one line on stderr, rewritten after each size ("12/30
// allreduce 4194304 B float32: 812 us, busbw 9.87 GB/s; about 14 s left") and cleared when the
// sweep ends. Off when stderr is not a terminal, so piped output is exactly the results.
#pragma once

#include <chrono>
#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "bench/bench_runner.h"

namespace tpcomm::bench {

class SweepProgress {
 public:
  SweepProgress(std::ostream& err, bool enabled) : err_(err), enabled_(enabled) {}

  bool enabled() const { return enabled_; }
  /// The sweep's steps, by bytes each, in the order they run.
  void start(std::vector<size_t> step_bytes);
  /// One step done; redraws the line.
  void step(const Row& row);
  /// Clears the line.
  void finish();

  /// Seconds the remaining steps should take: each costs the last step's time scaled by its
  /// size, and at least the fastest step seen (sizes of a sweep grow geometrically, so the
  /// average step time says little). Public for tests.
  static double estimate_left(const std::vector<size_t>& step_bytes, size_t done,
                              double last_seconds, double min_seconds);
  /// The line for step `done` of `total` (without the carriage return). Public for tests.
  static std::string line(size_t done, size_t total, const Row& row, double left_seconds);

 private:
  std::ostream& err_;
  bool enabled_;
  std::vector<size_t> bytes_;
  size_t done_ = 0;
  double min_seconds_ = -1;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace tpcomm::bench
