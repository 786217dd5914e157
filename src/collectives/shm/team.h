// Internal to src/collectives/shm: the state the direct-read algorithms share. Every rank of
// the host owns one segment (layout below) mapped by all; a rank writes only into its own
// segment (except the sleepers count, and its own slot among the shared slots in rank 0's
// segment) and reads the others'.
//
// Synchronisation is one monotonic phase counter per rank: all ranks run the same sequence
// of phases, so phase v means the same step everywhere. post() publishes "my step v is done"
// (a release store); waiting for a peer is reading its counter until it reaches v (acquire).
// A rank posts each phase on exactly one of its counters (the flag line, a small slot or a
// shared slot), in increasing order, and all ranks post a given step on the same kind of
// counter: a waiter that finds a peer's step on another counter than the awaited one
// concludes that the ranks run different collectives.
// A buffer that peers read in phase v may be rewritten once each of them has posted v + 1:
// release_[] remembers that value per buffer and known_[] the progress already seen from
// each peer, so the common case costs no extra read.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/deadline.h"
#include "core/liveness.h"
#include "core/stage_policy.h"

namespace tpcomm::coll::shm {

inline constexpr size_t kLine = 128;  // two 64-byte lines: no adjacent-line prefetch sharing
inline constexpr uint64_t kMagic = 0x6c6c6f636d687370ull;  // "pshmcoll"

/// The first line of a segment: identifies it (a peer checks the nonce it was told).
struct alignas(kLine) SegHeader {
  uint64_t magic;
  uint64_t nonce;
  uint64_t bytes;
  int32_t rank;
  int32_t size;
};

/// What a rank called, published with its steps: a peer that waits on one of this call's
/// steps compares it with its own call, so that ranks running different collectives (or the
/// same one with another dtype, count, root or reduce op) fail with a MismatchError naming
/// both instead of mixing their data. It rides in lines the waiter reads anyway.
struct CallSig {
  uint32_t call = 0;  ///< the rank's count of shared-memory collectives, from 1
  uint8_t op = 0;     ///< CollOp
  uint8_t dtype = 0;
  uint8_t redop = 0xff;  ///< ReduceOp, 0xff: none
  uint8_t pad = 0;
  int32_t root = -1;
  uint32_t pad2 = 0;
  uint64_t count = 0;  ///< elements each rank contributes
};

/// Calls remembered in the flag line (a peer is never that many calls ahead).
inline constexpr uint32_t kCallRing = 4;

/// A phase counter, the number of peers asleep on this segment's counters, and the recent
/// calls (by call number modulo kCallRing). The calls lie in a line of their own: a waiting
/// peer reads the counter's line now and then (Team::progress), and the owner writes a call
/// record at every call's start; sharing the line made that write wait for the line to come
/// back before the call's first post.
struct alignas(kLine) FlagLine {
  std::atomic<uint64_t> seq;
  std::atomic<uint32_t> sleepers;
  alignas(kLine) CallSig calls[kCallRing];
};
static_assert(sizeof(FlagLine) == 2 * kLine);

/// A small message: its phase, its call and the first 96 payload bytes share one line (a
/// reader takes one cache miss for all); longer payloads continue into the following bytes.
struct alignas(kLine) SmallSlot {
  std::atomic<uint64_t> seq;
  CallSig call;
  uint8_t payload[kLine - 8 - sizeof(CallSig)];
};
inline constexpr size_t kSmallHeader = 8 + sizeof(CallSig);

/// What an owner tells the readers of a chunked step (one per staging buffer, protected like
/// the buffer): whether they read its own buffer at `addr` directly (core/cross_memory.h) rather
/// than its staging.
struct alignas(kLine) StepDesc {
  uint64_t addr;
  uint64_t direct;
};

/// Small slots per rank, used in turn: a rank reuses one only once every peer has posted a
/// later step, so a broadcast root runs up to kSmallSlots - 1 calls ahead of its readers.
inline constexpr int kSmallSlots = 8;
/// Payload bytes of each small slot.
inline constexpr size_t kSmallBytes = 8192;
inline constexpr size_t kSmallSlotStride = (kSmallHeader + kSmallBytes + kLine - 1) / kLine * kLine;

/// A shared slot: for the tiniest messages every rank's slot of a call lies in the same line
/// (two ranks per 64 bytes) of rank 0's segment, each rank writing only its own 32 bytes. A
/// line that both ranks write moves between the two cores once per step, where one line per
/// rank moves twice (the owner takes it back, then the reader fetches it): measured here, an
/// exchange of 8 bytes costs 0.14 us this way against 0.21 us with a line each.
struct alignas(32) SharedSlot {
  std::atomic<uint64_t> seq;
  /// The call (CallSig::call) << 32 | call_hash() of its arguments: a waiter compares it with
  /// its own, and only on a difference reads the full CallSig from the peer's flag line (two
  /// different calls whose 32-bit hashes collide, about 2^-32 of mismatched calls, pass).
  uint64_t sig;
  uint8_t payload[16];
};
static_assert(sizeof(SharedSlot) == 32);
/// Payload bytes of a shared slot, and the most ranks the shared slots serve.
inline constexpr size_t kSharedBytes = sizeof(SharedSlot::payload);
inline constexpr int kSharedMaxRanks = 64;
/// Bytes of one parity's shared slots (they alternate like the small slots).
inline constexpr size_t kSharedArea = kSharedMaxRanks * sizeof(SharedSlot);

/// Staging buffers per rank: three let all_reduce post once per chunk (peers still read
/// the previous chunk's result while this rank fills the next).
inline constexpr int kBuffers = 3;

/// Offsets inside a segment.
inline constexpr size_t kFlagOffset = kLine;
inline constexpr size_t kSmallOffset = kFlagOffset + sizeof(FlagLine);
inline constexpr size_t kDescOffset = kSmallOffset + kSmallSlots * kSmallSlotStride;
inline constexpr size_t kSharedOffset = kDescOffset + kBuffers * kLine;  // rank 0's segment
inline constexpr size_t kStagingOffset = (kSharedOffset + 2 * kSharedArea + 4095) / 4096 * 4096;

/// One rank's view of the host's segments, with the phase protocol.
class Team {
 public:
  Team(int rank, int size, std::vector<uint8_t*> bases, size_t staging_bytes, size_t chunk_bytes,
       int spin_us);

  int rank() const { return rank_; }
  int size() const { return size_; }

  /// Staging buffer `b` (0 .. kBuffers-1) of rank `r`, `buf_bytes()` long.
  uint8_t* staging(int r, int b) const { return bases_[r] + kStagingOffset + b * buf_; }
  size_t buf_bytes() const { return buf_; }
  /// Pipelining chunk in bytes (<= buf_bytes()).
  size_t chunk_bytes() const { return chunk_; }
  /// The chunk for a transfer of `total` bytes: chunk_bytes(), but smaller for medium sizes
  /// so that they still pipeline over about 8 chunks (never below 256 KiB). Every rank
  /// computes the same value.
  size_t chunk_for(size_t total) const {
    const size_t want = std::max<size_t>(size_t{256} << 10, total / 8 / 64 * 64);
    return std::min(chunk_, want);
  }
  /// The step descriptor of staging buffer `b` of rank `r`.
  StepDesc* desc(int r, int b) const {
    return reinterpret_cast<StepDesc*>(bases_[r] + kDescOffset + b * kLine);
  }

  /// Enables single-copy reads of peers' buffers (process ids of every rank) for blocks of at
  /// least `min_bytes`; `always` (TPCOMM_SHM_COLL_CMA=on): every large broadcast and
  /// all_gather reads whole blocks directly, else only where it measured faster than the
  /// staging copies. The same on every rank (HostColl::create agrees on them).
  void enable_cross_reads(std::vector<long> pids, size_t min_bytes, bool always) {
    pids_ = std::move(pids);
    cross_min_ = min_bytes;
    cross_always_ = always;
  }
  /// See enable_cross_reads().
  bool cross_always() const { return cross_always_; }
  /// True when blocks of `bytes` are read straight from their owner's buffer.
  bool cross_reads(size_t bytes) const { return !pids_.empty() && bytes >= cross_min_; }
  /// True when a block of `bytes` is read whole with one cross-memory copy: always with
  /// TPCOMM_SHM_COLL_CMA=on, and in auto mode up to kAutoDirectMax, where it measured faster
  /// than the staging copies on a 2-vCPU VM (idle, ranks bound: broadcast
  /// 128 KiB 6.8 against 14.4 us, 2 MiB 194 against 271 us, all_gather 128 KiB 8.3 against
  /// 9.7-14.6 us, 8 MiB 895 against 1259 us; above a few MiB page pinning loses: broadcast in
  /// place 8 MiB 866 against 738 us, all_gather 64 MiB 13.0 against 11.6 ms).
  bool cross_direct(size_t bytes) const {
    return cross_reads(bytes) && (cross_always_ || bytes <= kAutoDirectMax);
  }
  static constexpr size_t kAutoDirectMax = 4u << 20;
  /// Process id of rank `r` (valid when cross reads are enabled).
  long pid(int r) const { return pids_[static_cast<size_t>(r)]; }

  /// Payload of small slot `p` of rank `r`.
  uint8_t* small_payload(int r, int p) const { return slot(r, p)->payload; }

  /// True when a message of `bytes` per rank fits the shared slots (and the group is small
  /// enough for them).
  bool fits_shared(size_t bytes) const { return bytes <= kSharedBytes && size_ <= kSharedMaxRanks; }
  /// Payload of rank `r`'s shared slot `p`.
  uint8_t* shared_payload(int r, int p) const { return shared(r, p)->payload; }
  /// Shared slot for the next message (alternates), free for writing.
  int acquire_shared(const char* what) {
    // Inline: on the path of every tiny collective; a peer not yet known past the slot's
    // release step (rare) is waited for out of line.
    const int p = next_shared_;
    next_shared_ ^= 1;
    const uint64_t need = shared_release_[p];
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && known_[static_cast<size_t>(r)] < need) wait_peer(r, need, what);
    }
    return p;
  }
  /// Publishes the next phase in this rank's shared slot `p` (its payload written before).
  uint64_t post_shared(int p);
  /// Waits until every other rank has posted phase `v` in its shared slot `p`.
  void wait_shared_all(int p, uint64_t v, const char* what);

  /// The staging buffer the next chunked step uses (they rotate), after waiting until no
  /// peer still reads it. `what` names the operation for a timeout.
  int acquire_buf(const char* what);
  /// Marks buffer `b` as read by peers after the phase just posted (free again once they
  /// have posted the next).
  void release_buf(int b) { buf_release_[b] = phase_ + 1; }

  /// Small slot for the next small message (alternates), free for writing.
  int acquire_small(const char* what);

  /// Publishes the next phase on the main counter; returns its value. Orders every earlier
  /// store (streaming stores included) before it.
  uint64_t post();
  /// Publishes the next phase in small slot `p` (its payload written before).
  uint64_t post_small(int p);

  /// Waits until peer `r` has posted phase `v` (on any of its counters).
  void wait_peer(int r, uint64_t v, const char* what);
  /// Waits until every other rank has posted phase `v`.
  void wait_all(uint64_t v, const char* what);
  /// Waits until peer `r` has posted phase `v` in its small slot `p`.
  void wait_small(int r, int p, uint64_t v, const char* what);
  /// wait_small for every other rank.
  void wait_small_all(int p, uint64_t v, const char* what);

  /// Deadline of the running call.
  void set_deadline(Deadline dl) { dl_ = dl; }
  /// The job's liveness watch and the members' global ranks (index: team rank): a wait past
  /// its spin asks the watch every kWatchPeriod whether a member died or stayed stopped, and
  /// fails with a PeerError naming it instead of waiting for the deadline.
  void set_watch(std::shared_ptr<PeerWatch> watch, std::vector<int> global_ranks) {
    watch_ = std::move(watch);
    global_ = std::move(global_ranks);
  }
  static constexpr std::chrono::milliseconds kWatchPeriod{20};
  /// Testing (TPCOMM_SHM_COLL_STOP_AT): this rank stops itself (SIGSTOP) on entering its
  /// n-th wait on a peer; 0: never.
  void set_stop_at(uint64_t n) { stop_at_ = n; }
  /// Starts a call: publishes what this rank called (s.call is set here) for its peers.
  void begin_call(const CallSig& s);
  /// TPCOMM_CHECK_SIGNATURE: compare the peers' calls with ours (published either way).
  void set_check_calls(bool on) { check_calls_ = on; }
  /// Set after a timeout: the phases of the ranks no longer agree.
  bool broken() const { return broken_; }
  /// The collectives that write staging chunks with a StagePolicy: each learns on its own,
  /// since the loops they time move different amounts per chunk (all_gather out of place also
  /// writes its own block: a rate learned there would mislead in place, and back).
  enum class StageUse { AllReduce, AllGather, AllGatherOutOfPlace, Broadcast, kCount };
  /// How this rank writes the staging chunks of large transfers of `use` (cached or
  /// streaming stores).
  StagePolicy& stage_policy(StageUse use) { return stage_policies_[static_cast<size_t>(use)]; }
  /// Every use's policy in `mode` (TPCOMM_SHM_COLL_STAGE_STORES), nothing learned yet.
  void set_stage_mode(StagePolicy::Mode mode) { stage_policies_.fill(StagePolicy(mode)); }

 private:
  FlagLine* flag(int r) const { return reinterpret_cast<FlagLine*>(bases_[r] + kFlagOffset); }
  SmallSlot* slot(int r, int p) const {
    return reinterpret_cast<SmallSlot*>(bases_[r] + kSmallOffset + p * kSmallSlotStride);
  }
  SharedSlot* shared(int r, int p) const {
    return reinterpret_cast<SharedSlot*>(bases_[0] + kSharedOffset + p * kSharedArea) + r;
  }
  /// 32 bits of the call's arguments (op, dtype, reduce op, root, count) for SharedSlot::sig.
  static uint32_t call_hash(const CallSig& s);
  uint64_t progress(int r) const;
  void wake_sleepers(std::atomic<uint64_t>& word);
  // Spins, yields, then sleeps until `ready()`; `word` is what a sleeper waits on.
  template <class Ready>
  void wait_until(int r, std::atomic<uint64_t>& word, uint64_t v, Ready ready, const char* what);
  [[noreturn]] void timeout(const std::vector<int>& missing, uint64_t v, const char* what);
  // Asks the watch about every member; throws PeerError for a lost one.
  void check_members(uint64_t v, const char* what);
  // The test hook of set_stop_at().
  void count_wait() {
    if (stop_at_ != 0 && ++waits_ == stop_at_) stop_here();
  }
  void stop_here();
  /// Once per peer and call, on a step of this call: `theirs` must be this rank's call. A
  /// record of a later call proves nothing (a peer may run calls ahead, e.g. a reduce's
  /// non-root ranks, and the flag line keeps only the last kCallRing calls).
  void check_call(int r, uint64_t v, const CallSig& theirs) {
    if (!check_calls_ || v <= call_base_ || checked_[r] == sig_.call) return;
    checked_[r] = sig_.call;
    if (theirs.call > sig_.call) return;
    if (theirs.call != sig_.call || theirs.op != sig_.op || theirs.dtype != sig_.dtype ||
        theirs.redop != sig_.redop || theirs.root != sig_.root || theirs.count != sig_.count)
      mismatch(r, theirs);
  }
  [[noreturn]] void mismatch(int r, const CallSig& theirs);
  /// A rank that found a mismatch sets all its counters to this, so that every peer waiting
  /// on it wakes and fails too (with the call it published) instead of timing out.
  static constexpr uint64_t kPoison = uint64_t{1} << 62;
  void poison();
  [[noreturn]] void poisoned(int r, const CallSig& theirs);
  // `seen` without the poison bit; throws when the peer poisoned before reaching step `v`.
  uint64_t check_poison(int r, uint64_t seen, uint64_t v, const CallSig& theirs) {
    if (seen < kPoison) return seen;
    seen &= ~kPoison;
    if (seen < v) poisoned(r, theirs);
    return seen;
  }

  int rank_;
  int size_;
  std::vector<uint8_t*> bases_;
  size_t buf_;
  size_t chunk_;
  int spin_us_;
  uint64_t phase_ = 0;
  std::vector<uint64_t> known_;  // progress seen from each peer
  CallSig sig_;                  // the running call
  uint64_t call_base_ = 0;       // phase_ when it began: its steps are above
  uint32_t calls_begun_ = 0;
  bool check_calls_ = true;
  std::vector<uint32_t> checked_;  // the call each peer was last checked in
  uint64_t buf_release_[kBuffers] = {0, 0, 0};
  uint64_t small_release_[kSmallSlots] = {};
  uint64_t shared_release_[2] = {0, 0};
  int next_shared_ = 0;
  uint64_t shared_sig_ = 0;  // sig_.call << 32 | call_hash(sig_), set by begin_call
  uint32_t args_hash_ = 0;   // call_hash(sig_)
  int next_buf_ = 0;
  int next_small_ = 0;
  Deadline dl_ = Deadline::never();
  bool broken_ = false;
  std::vector<long> pids_;  // empty: no cross reads
  size_t cross_min_ = 0;
  bool cross_always_ = false;
  std::array<StagePolicy, static_cast<size_t>(StageUse::kCount)> stage_policies_;
  std::shared_ptr<PeerWatch> watch_;  // null: no liveness checks (deadline only)
  std::vector<int> global_;
  uint64_t stop_at_ = 0;
  uint64_t waits_ = 0;
};

}  // namespace tpcomm::coll::shm
