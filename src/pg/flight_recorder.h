// The flight recorder (issue: never hang silently): the last N collectives of each group in a
// ring of fixed-size entries (operation, sequence number, dtype, element count, root, reduce
// op, algorithm, state, start and end times), written on the collective path with no lock,
// no allocation, no formatting and no clock read (a dozen stores), and dumped
// to one text file per rank when a collective fails with TimeoutError, PeerError or
// MismatchError (once per group), on SIGUSR1, or on dump_flight_recorder(). `tpinfo --trace
// DIR` merges the dumps of all ranks and names the rank behind or the call that disagrees.
//
// TPCOMM_FLIGHT_RECORDER=N entries per group (default 2048, rounded up to a power of two;
// 0: off, no handler, no files); TPCOMM_FLIGHT_RECORDER_DIR (default
// /tmp/tpcomm_trace_<job id>). File format: docs/reliability.md ("Flight recorder").
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tpcomm::detail::fr {

/// Where an operation is.
enum class State : uint8_t { Free = 0, Enqueued = 1, Started = 2, Completed = 3, Failed = 4 };

/// One recorded operation: plain data, written by the group's single collective writer.
struct Entry {
  uint64_t seq;      ///< the group's collective sequence number
  int64_t count;     ///< element count of the signed arguments; -1: not recorded
  int64_t start_ns;  ///< steady clock (converted to wall-clock ns at dump)
  int64_t end_ns;    ///< steady clock, failed calls only (0: not recorded)
  const char* algo;  ///< the algorithm's catalogue name (a static string) or null
  int32_t root;      ///< -1: none
  int16_t redop;     ///< -1: none
  uint8_t op;        ///< engine_comm.h op_code()
  uint8_t dtype;     ///< 0xFF: not recorded
  uint8_t state;     ///< State, accessed through std::atomic_ref (the dump reads it)
  uint8_t pad[7];
};
static_assert(sizeof(Entry) == 56);

/// The ring of one group (its collectives). Made when the group runs its first collective.
class Ring {
 public:
  /// Identity of the group, written into the dump.
  struct Meta {
    uint64_t group_id = 0;
    std::string group_name;
    int world_rank = -1;
    int world_size = 0;
    int group_rank = -1;
    std::vector<int> ranks;       ///< global ranks of the members
    const void* world = nullptr;  ///< the WorldState (dumps are per world)
  };

  Ring(Meta meta, size_t entries);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  /// Starts an entry (single writer: the group's collectives run one at a time). `start_ns`:
  /// the call's start on the steady clock (the caller derives it from the deadline it
  /// computed anyway: no clock read here).
  Entry* begin(uint8_t op, uint64_t seq, int64_t start_ns) {
    uint64_t i = next_.load(std::memory_order_relaxed);
    next_.store(i + 1, std::memory_order_relaxed);
    Entry* e = &e_[i & mask_];
    // The ring is larger than L1: the entry two calls ahead is fetched for writing now, so
    // that its stores do not wait for the line in a later call (a locked store of the
    // collective's first post waits for every earlier store).
    __builtin_prefetch(&e_[(i + 2) & mask_], 1);
    std::atomic_ref<uint8_t>(e->state).store(static_cast<uint8_t>(State::Free),
                                             std::memory_order_relaxed);
    e->seq = seq;
    e->count = -1;
    e->start_ns = start_ns;
    e->end_ns = 0;
    e->algo = nullptr;
    e->root = -1;
    e->redop = -1;
    e->op = op;
    e->dtype = 0xFF;
    std::atomic_ref<uint8_t>(e->state).store(static_cast<uint8_t>(State::Started),
                                             std::memory_order_release);
    return e;
  }
  /// Ends an entry: no clock read for a completed call (it ended before the next one
  /// started); a failed one records when it failed.
  static void end(Entry* e, State s, const char* algo) {
    if (s == State::Failed) e->end_ns = steady_ns();
    e->algo = algo;
    std::atomic_ref<uint8_t>(e->state).store(static_cast<uint8_t>(s), std::memory_order_release);
  }

  /// The steady clock (CLOCK_MONOTONIC, as std::chrono::steady_clock) in ns.
  static int64_t steady_ns();

  const Meta& meta() const { return meta_; }
  /// Appends the group's section of a dump (entries oldest first) to `out`; steady-clock
  /// times become wall-clock ns by adding `to_wall_ns`.
  void format(std::string& out, int64_t to_wall_ns) const;
  /// True the first time it is called (a group dumps once on errors).
  bool first_error_dump() { return !error_dumped_.exchange(true); }

 private:
  Meta meta_;
  Entry* e_ = nullptr;  ///< calloc'd: untouched pages cost no memory
  uint64_t mask_ = 0;
  std::atomic<uint64_t> next_{0};
  std::atomic<bool> error_dumped_{false};
};

/// A ring for a new group (registered for dumps), or null when TPCOMM_FLIGHT_RECORDER=0.
/// The first one installs the SIGUSR1 handler (when SIGUSR1 has its default action).
std::shared_ptr<Ring> make_ring(Ring::Meta meta);

/// Called when a collective of `ring`'s group failed: dumps the world's rings once per group
/// when `error` is a TimeoutError, PeerError or MismatchError.
void on_error(Ring& ring, std::exception_ptr error);

/// Writes the dump of every world in this process now (one file per world rank); returns
/// the paths written. `reason` goes into the files.
std::vector<std::string> dump_flight_recorder(const std::string& reason);

/// The dump directory (TPCOMM_FLIGHT_RECORDER_DIR, else /tmp/tpcomm_trace_<job id>).
std::string dump_dir();

}  // namespace tpcomm::detail::fr
