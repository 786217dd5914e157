// How a process writes a staging chunk that a peer process reads next (the shm_direct
// collectives, src/collectives/shm, and the shm transport's staged puts, transports/shm).
//
// Cached stores leave the chunk in this core's caches, and the reader fetches it from there:
// the fastest path where the two cores share a cache. Where they do not (a VM whose host
// places the two vCPUs far apart, for seconds to minutes at a time), every cached store to a
// line the reader fetched last time waits for that line to be taken back from the other core,
// and the writer's copy into staging falls to ~3-4 GB/s; streaming stores send the chunk
// through memory instead and keep ~10-14 GB/s (a 2-process model on a 2-vCPU Zen 4 VM).
// Which case holds changes while a job runs, so in auto mode the writer times its own copies
// into staging, keeps a moving average of each kind's rate, writes with the faster one, and
// now and then writes one chunk with the other to see whether that changed.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace tpcomm {

class StagePolicy {
 public:
  /// TPCOMM_SHM_COLL_STAGE_STORES (collectives) or TPCOMM_SHM_STAGE_STORES (transport).
  enum class Mode { Auto, Cached, Streaming };
  /// Chunks between two tries of the other kind: from kMinProbe, doubled after each try that
  /// lost (up to kMaxProbe: 1 GiB of 2 MiB chunks), back to kMinProbe after a switch.
  static constexpr uint32_t kMinProbe = 16, kMaxProbe = 512;

  explicit StagePolicy(Mode mode = Mode::Auto) : mode_(mode) {}
  /// The mode a configuration value names ("cached", "streaming"; anything else: auto).
  static Mode parse(std::string_view v) {
    return v == "cached" ? Mode::Cached : v == "streaming" ? Mode::Streaming : Mode::Auto;
  }

  Mode mode() const { return mode_; }

  /// Whether the next chunk goes in with streaming stores (write() asks, and callers that time
  /// their chunks themselves). `measured`: the caller will record() its time; only such
  /// chunks try the other kind (a try that is not timed would only cost).
  bool streaming(bool measured = true) {
    if (mode_ != Mode::Auto) return mode_ == Mode::Streaming;
    if (!measured) return best_;
    // Measure both kinds first (cached first: the common case), then try the other kind
    // every probe_every_ measured chunks.
    if (rate_[0] == 0) return false;
    if (rate_[1] == 0) return true;
    if (++since_probe_ >= probe_every_) {
      since_probe_ = 0;
      return !best_;
    }
    return best_;
  }

  /// The time a chunk of `bytes` took that streaming() said to write with `asked` stores and
  /// that went in with `used` ones (the writer's copy, and whatever it does in the same loop:
  /// the same work for both kinds, though a loop that also reads a peer's staging feels the
  /// peer's choice too). A chunk that could not use the kind asked (alignment) teaches nothing
  /// about the choice and is ignored.
  void record(bool asked, bool used, size_t bytes, std::chrono::nanoseconds took) {
    if (mode_ != Mode::Auto || bytes == 0 || asked != used) return;
    const bool streaming = used;
    const double rate = static_cast<double>(bytes) / static_cast<double>(took.count() + 1);
    // A try of the other kind replaces its estimate (the old one is stale by then); the kind
    // in use is averaged, so that one preempted chunk does not flip the choice alone.
    const bool probe = streaming != best_;
    double& r = rate_[streaming ? 1 : 0];
    r = r == 0 || probe ? rate : r + (rate - r) * kWeight;
    ++chunks_[streaming ? 1 : 0];
    // The other kind takes over only when clearly faster: where both are close (the cores
    // share a cache: 10-25% apart) the timings of loops that also read a peer's staging are
    // noisier than that, and switching on noise made two ranks flip back and forth (a 256 MiB
    // all_gather: 500-800 chunks of each kind per rank in 25 calls).
    const bool was = best_;
    const double margin = was ? kSwitchToCached : kSwitchToStreaming;
    if (rate_[was ? 0 : 1] > margin * rate_[was ? 1 : 0]) best_ = !was;
    if (best_ != was) {
      probe_every_ = kMinProbe;
      since_probe_ = 0;
    } else if (probe) {
      probe_every_ = std::min(probe_every_ * 2, kMaxProbe);
    }
  }

  /// Writes one chunk of `bytes` into staging: calls `copy(nt)` with the kind streaming()
  /// gives (nt: streaming stores), timed and recorded when `measured`. `copy` returns the kind
  /// it used (false where it had to fall back to cached stores), or nothing when it always
  /// uses the kind given. Returns the kind used.
  template <class Copy>
  bool write(size_t bytes, bool measured, Copy&& copy) {
    const bool nt = streaming(measured);
    if (mode_ != Mode::Auto || !measured) return run(copy, nt);
    const auto t0 = std::chrono::steady_clock::now();
    const bool used = run(copy, nt);
    record(nt, used, bytes, std::chrono::steady_clock::now() - t0);
    return used;
  }

  /// Moving-average rate of cached (0) or streaming (1) stores, bytes per ns (0: not measured).
  double rate(bool streaming) const { return rate_[streaming ? 1 : 0]; }
  /// Chunks timed with each kind so far (cached, streaming), for the logs.
  uint64_t timed_chunks(bool streaming) const { return chunks_[streaming ? 1 : 0]; }

 private:
  template <class Copy>
  static bool run(Copy& copy, bool nt) {
    if constexpr (std::is_void_v<decltype(copy(nt))>) {
      copy(nt);
      return nt;
    } else {
      return copy(nt);
    }
  }

  static constexpr double kWeight = 0.5;  // of each new chunk in the moving average
  // How much faster the other kind must be to take over. Back to cached stores takes less:
  // where the cores share a cache they are 10-25% faster, which a 25% margin would leave unused
  // once a far-placement spell has chosen streaming (2-rank 256 MiB all_reduce and all_gather
  // 10-25% behind cached stores); the band between the two margins still keeps noise from
  // flipping the choice.
  static constexpr double kSwitchToStreaming = 1.25;
  static constexpr double kSwitchToCached = 1.10;
  Mode mode_;
  double rate_[2] = {0, 0};
  uint64_t chunks_[2] = {0, 0};
  bool best_ = false;  // the faster kind so far (false: cached)
  uint32_t since_probe_ = 0;
  uint32_t probe_every_ = kMinProbe;
};

}  // namespace tpcomm
