// Deadlines: every blocking call in tpcomm takes one (DESIGN.md principle 4).
#pragma once

#include <time.h>

#include <chrono>

namespace tpcomm {

/// A point in steady time after which a blocking call gives up.
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  /// A deadline `d` from now; a negative or huge duration means "never".
  static Deadline after(std::chrono::milliseconds d) {
    Deadline x;
    if (d.count() < 0 || d > std::chrono::hours(24 * 365)) {
      x.t_ = Clock::time_point::max();
    } else {
      x.t_ = Clock::now() + d;
    }
    return x;
  }
  /// after(d) read from the coarse clock (CLOCK_MONOTONIC_COARSE, the same clock a tick
  /// behind: ~13 ns instead of ~50-75 ns in a VM) when d is at least a second, so that the
  /// deadline lands at most one tick (a few ms) early; shorter deadlines read the fine clock.
  /// For the per-call deadlines of latency-bound operations.
  static Deadline after_coarse(std::chrono::milliseconds d) {
    if (d < std::chrono::seconds(1) || d > std::chrono::hours(24 * 365)) return after(d);
    Deadline x;
    x.t_ = coarse_now() + d;
    return x;
  }
  /// The steady clock read coarsely (CLOCK_MONOTONIC_COARSE: the same clock, up to a tick
  /// behind, at a fraction of a fine reading's cost in a VM).
  static Clock::time_point coarse_now() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return Clock::time_point(std::chrono::duration_cast<Clock::duration>(
        std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
  }
  static Deadline never() {
    Deadline x;
    x.t_ = Clock::time_point::max();
    return x;
  }

  bool expired() const { return Clock::now() >= t_; }
  bool is_never() const { return t_ == Clock::time_point::max(); }
  Clock::time_point when() const { return t_; }

  /// Time left, clamped at zero.
  std::chrono::milliseconds remaining() const {
    if (is_never()) return std::chrono::hours(24 * 365);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t_ - Clock::now());
    return left.count() > 0 ? left : std::chrono::milliseconds(0);
  }
  /// Time left in whole milliseconds for poll()/epoll_wait(): -1 for never, at least 0.
  int poll_timeout_ms() const {
    if (is_never()) return -1;
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(t_ - Clock::now());
    if (left.count() <= 0) return 0;
    return static_cast<int>((left.count() + 999) / 1000);
  }

 private:
  Clock::time_point t_{};
};

}  // namespace tpcomm
