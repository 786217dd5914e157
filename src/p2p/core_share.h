// Whether a thread gets its core: its CPU time against the wall clock over windows of at least
// a few milliseconds. Waits read it (Engine::note_core_share) to tell the progress thread how
// often to look while they spin: often when the core is contended (its wake-ups win the core
// back for the rank), seldom when it is not (each wake-up only interrupts the spinner).
#pragma once

#include <cstdint>
#include <optional>

namespace tpcomm::p2p {

class CoreShareMeter {
 public:
  /// A window closes after `window_ns` of wall clock; the thread is contended when it got
  /// less than `min_share_pct` percent of that window as CPU time.
  explicit CoreShareMeter(int64_t window_ns, int min_share_pct = 90)
      : window_ns_(window_ns), min_share_pct_(min_share_pct) {}

  /// Whether a window has passed at wall time `wall_ns` (then read the CPU time and call
  /// close_window): cheap, so that the CPU time (a system call) is read once per window.
  bool due(int64_t wall_ns) const { return !started_ || wall_ns - at_ns_ >= window_ns_; }

  /// Closes the window at wall time `wall_ns` with the thread's CPU time `cpu_ns` and starts
  /// the next: whether the thread was contended in it, or nothing for the first call (no
  /// window yet) and for a clock that went backwards.
  std::optional<bool> close_window(int64_t wall_ns, int64_t cpu_ns) {
    std::optional<bool> verdict;
    if (started_ && wall_ns > at_ns_ && cpu_ns >= cpu_ns_)
      verdict = (cpu_ns - cpu_ns_) * 100 < (wall_ns - at_ns_) * min_share_pct_;
    started_ = true;
    at_ns_ = wall_ns;
    cpu_ns_ = cpu_ns;
    return verdict;
  }

 private:
  int64_t window_ns_;
  int min_share_pct_;
  bool started_ = false;
  int64_t at_ns_ = 0;
  int64_t cpu_ns_ = 0;
};

}  // namespace tpcomm::p2p
