// tpbench's progress line (bench_progress.h).
#include "bench/bench_progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tpcomm::bench {

namespace {

std::string duration_text(double s) {
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.0f s", std::ceil(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%d min %02d s", static_cast<int>(s) / 60,
                  static_cast<int>(s) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%d h %02d min", static_cast<int>(s) / 3600,
                  static_cast<int>(s) % 3600 / 60);
  }
  return buf;
}

}  // namespace

void SweepProgress::start(std::vector<size_t> step_bytes) {
  bytes_ = std::move(step_bytes);
  done_ = 0;
  min_seconds_ = -1;
  last_ = std::chrono::steady_clock::now();
}

double SweepProgress::estimate_left(const std::vector<size_t>& step_bytes, size_t done,
                                    double last_seconds, double min_seconds) {
  if (done == 0 || done > step_bytes.size()) return 0;
  const double last_bytes = std::max<double>(1, static_cast<double>(step_bytes[done - 1]));
  double left = 0;
  for (size_t i = done; i < step_bytes.size(); ++i)
    left += std::max(min_seconds, last_seconds * static_cast<double>(step_bytes[i]) / last_bytes);
  return left;
}

std::string SweepProgress::line(size_t done, size_t total, const Row& row, double left_seconds) {
  const Measure& m = row.oop.valid ? row.oop : row.ip;
  char buf[160];
  std::snprintf(buf, sizeof buf, "tpbench: %zu/%zu %s %zu B %s: %.1f us, busbw %.2f GB/s", done,
                total, row.op.c_str(), row.size, dtype_name(row.dtype), m.time_us, m.busbw);
  std::string s = buf;
  if (done < total) s += "; about " + duration_text(left_seconds) + " left";
  return s;
}

void SweepProgress::step(const Row& row) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  double secs = std::chrono::duration<double>(now - last_).count();
  last_ = now;
  min_seconds_ = min_seconds_ < 0 ? secs : std::min(min_seconds_, secs);
  ++done_;
  double left = estimate_left(bytes_, done_, secs, min_seconds_);
  // "\r" back to the start, ESC[K clears what a longer previous line left.
  err_ << "\r" << line(done_, bytes_.size(), row, left) << "\033[K" << std::flush;
}

void SweepProgress::finish() {
  if (enabled_ && done_ > 0) err_ << "\r\033[K" << std::flush;
}

}  // namespace tpcomm::bench
