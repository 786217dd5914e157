// The phase protocol of the direct-read collectives: posts, bounded waits (spin, yield,
// futex), buffer reuse.
#include "collectives/shm/team.h"

#include <immintrin.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <ctime>
#include <initializer_list>

#include "collectives/types.h"
#include "core/oversubscribe.h"
#include "tpcomm/error.hpp"
#include "tpcomm/types.hpp"

namespace tpcomm::coll::shm {

namespace {

// The low 32 bits of a counter (little-endian): the word a sleeper waits on.
uint32_t* futex_word(std::atomic<uint64_t>& w) { return reinterpret_cast<uint32_t*>(&w); }

void futex_wait(std::atomic<uint64_t>& w, uint32_t seen, long ns) {
  timespec ts{0, ns};
  ::syscall(SYS_futex, futex_word(w), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint64_t>& w) {
  ::syscall(SYS_futex, futex_word(w), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// After spinning, waiters yield this long before sleeping on a futex (as the p2p engine's
// TPCOMM_WAIT_YIELD_US default): a peer that is merely slower is met without a wake-up.
constexpr int kYieldUs = 2000;

}  // namespace

Team::Team(int rank, int size, std::vector<uint8_t*> bases, size_t staging_bytes,
           size_t chunk_bytes, int spin_us)
    : rank_(rank),
      size_(size),
      bases_(std::move(bases)),
      buf_(staging_bytes / kBuffers / 64 * 64),
      chunk_(std::min(chunk_bytes, buf_)),
      spin_us_(spin_us),
      known_(static_cast<size_t>(size), 0),
      checked_(static_cast<size_t>(size), 0) {
  // More ranks than cores: a spinning waiter holds the core its peer needs.
  spin_us_ = static_cast<int>(wait_spin_us(spin_us_, false, size_, container_cpus()));
  if (chunk_ < 64) chunk_ = 64;
}

uint64_t Team::progress(int r) const {
  uint64_t v = flag(r)->seq.load(std::memory_order_acquire);
  v = std::max(v, slot(r, 0)->seq.load(std::memory_order_acquire));
  v = std::max(v, slot(r, 1)->seq.load(std::memory_order_acquire));
  if (size_ <= kSharedMaxRanks) {
    v = std::max(v, shared(r, 0)->seq.load(std::memory_order_acquire));
    v = std::max(v, shared(r, 1)->seq.load(std::memory_order_acquire));
  }
  return v;
}

uint32_t Team::call_hash(const CallSig& s) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (uint64_t x : {uint64_t{s.op}, uint64_t{s.dtype}, uint64_t{s.redop},
                     static_cast<uint64_t>(static_cast<uint32_t>(s.root)), s.count}) {
    h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  }
  return static_cast<uint32_t>(h ^ (h >> 32));
}

void Team::wake_sleepers(std::atomic<uint64_t>& word) {
  // The seq_cst store before and this load pair with the sleeper's increment and re-check
  // (Dekker): either it sees the new value or we see it counted.
  if (flag(rank_)->sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(word);
}

uint64_t Team::post() {
  _mm_sfence();  // streaming stores of the kernels or memcpy are weakly ordered
  std::atomic<uint64_t>& w = flag(rank_)->seq;
  w.store(++phase_, std::memory_order_seq_cst);
  wake_sleepers(w);
  return phase_;
}

void Team::begin_call(const CallSig& s) {
  // The hash of the arguments is the last call's when they are the same (a loop of small
  // collectives repeats one call).
  if (s.op != sig_.op || s.dtype != sig_.dtype || s.redop != sig_.redop || s.root != sig_.root ||
      s.count != sig_.count || calls_begun_ == 0)
    args_hash_ = call_hash(s);
  sig_ = s;
  sig_.call = ++calls_begun_;
  call_base_ = phase_;
  flag(rank_)->calls[sig_.call % kCallRing] = sig_;  // published by this call's first post
  shared_sig_ = uint64_t{sig_.call} << 32 | args_hash_;
}

namespace {

// The operation's name as the API spells it.
const char* api_name(CollOp op) {
  switch (op) {
    case CollOp::Broadcast:
      return "broadcast";
    case CollOp::AllReduce:
      return "all_reduce";
    case CollOp::Reduce:
      return "reduce";
    case CollOp::AllGather:
      return "all_gather";
    case CollOp::ReduceScatter:
      return "reduce_scatter";
    case CollOp::Barrier:
      return "barrier";
    default:
      return coll_op_name(op);
  }
}

std::string describe_call(const CallSig& s) {
  std::string d = api_name(static_cast<CollOp>(s.op));
  if (static_cast<CollOp>(s.op) == CollOp::Barrier) return d;
  d += std::string("(") + dtype_name(static_cast<DType>(s.dtype)) + "[" + std::to_string(s.count) +
       "]";
  if (s.redop != 0xff) d += std::string(", ") + reduce_op_name(static_cast<ReduceOp>(s.redop));
  if (s.root >= 0) d += ", root " + std::to_string(s.root);
  return d + ")";
}

}  // namespace

void Team::poison() {
  // Each counter keeps the step it really reached under the poison bit: a peer still waiting
  // for an earlier step (of an earlier call) passes; one waiting beyond it fails.
  FlagLine* f = flag(rank_);
  f->calls[sig_.call % kCallRing] = sig_;
  for (int p = 0; p < 2; ++p) {
    std::atomic<uint64_t>& w = slot(rank_, p)->seq;
    slot(rank_, p)->call = sig_;
    w.store(kPoison | w.load(std::memory_order_relaxed), std::memory_order_seq_cst);
    futex_wake_all(w);
  }
  if (size_ <= kSharedMaxRanks) {
    for (int p = 0; p < 2; ++p) {
      std::atomic<uint64_t>& w = shared(rank_, p)->seq;
      shared(rank_, p)->sig = shared_sig_;
      w.store(kPoison | w.load(std::memory_order_relaxed), std::memory_order_seq_cst);
      futex_wake_all(w);
    }
  }
  f->seq.store(kPoison | f->seq.load(std::memory_order_relaxed), std::memory_order_seq_cst);
  futex_wake_all(f->seq);
}

void Team::poisoned(int r, const CallSig& theirs) {
  broken_ = true;
  throw MismatchError("shm_direct: rank " + std::to_string(rank_) + " called " +
                      describe_call(sig_) + " as its shared-memory collective #" +
                      std::to_string(sig_.call) + "; rank " + std::to_string(r) +
                      " (which called " + describe_call(theirs) +
                      ") found that the ranks disagree on this call. Every rank of the group must "
                      "call the same collectives in the same order with the same arguments; this "
                      "group's shared-memory collectives are now unusable (recreate the group)");
}

void Team::mismatch(int r, const CallSig& theirs) {
  broken_ = true;  // the ranks' steps no longer agree
  poison();
  std::string msg = "shm_direct: rank " + std::to_string(rank_) + " called " + describe_call(sig_) +
                    " as its shared-memory collective #" + std::to_string(sig_.call) +
                    ", but rank " + std::to_string(r);
  if (theirs.call != sig_.call)
    msg += " is at its collective #" + std::to_string(theirs.call) + " (" + describe_call(theirs) +
           "): a call was skipped on one of them";
  else
    msg += " called " + describe_call(theirs);
  throw MismatchError(msg +
                      ". Every rank of the group must call the same collectives in the same "
                      "order with the same dtype, element count, root and reduce op; this "
                      "group's shared-memory collectives are now unusable (recreate the group)");
}

uint64_t Team::post_small(int p) {
  slot(rank_, p)->call = sig_;
  std::atomic<uint64_t>& w = slot(rank_, p)->seq;
  w.store(++phase_, std::memory_order_seq_cst);
  wake_sleepers(w);
  small_release_[p] = phase_ + 1;
  return phase_;
}

template <class Ready>
void Team::wait_until(int r, std::atomic<uint64_t>& word, uint64_t v, Ready ready,
                      const char* what) {
  count_wait();
  // A line written by the peer arrives within ~100 ns: poll without pause first (pause
  // costs ~40 ns on recent cores, as much as the transfer).
  for (int i = 0; i < 256; ++i) {
    if (ready()) return;
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto next_watch = start + std::chrono::microseconds(spin_us_) + kWatchPeriod;
  const auto spin_end = start + std::chrono::microseconds(spin_us_);
  const auto yield_end = spin_end + std::chrono::microseconds(kYieldUs);
  for (uint32_t i = 1;; ++i) {
    _mm_pause();
    if (ready()) return;
    if ((i & 31) != 0) continue;
    // The peer reached step v on another counter (a shared slot, a small slot, the flag):
    // it runs another collective, or the same with another size regime.
    const uint64_t elsewhere = progress(r);
    if (elsewhere >= v && elsewhere < kPoison && !ready())
      mismatch(r, flag(r)->calls[sig_.call % kCallRing]);
    const auto now = Clock::now();
    if (now < spin_end) continue;
    if (watch_ && now >= next_watch) {
      next_watch = now + kWatchPeriod;
      check_members(v, what);
    }
    if (now >= dl_.when()) {
      std::vector<int> missing{r};
      timeout(missing, v, what);
    }
    if (now < yield_end) {
      sched_yield();
      continue;
    }
    // Sleep on the word the peer will write; bounded, so that a lost wake-up or the
    // deadline costs at most one period.
    std::atomic<uint32_t>& sleepers = flag(r)->sleepers;
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    uint64_t seen = word.load(std::memory_order_seq_cst);
    if (!ready()) futex_wait(word, static_cast<uint32_t>(seen), 1000000);
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void Team::wait_peer(int r, uint64_t v, const char* what) {
  if (known_[r] >= v) return;
  uint64_t seen = 0;
  wait_until(
      r, flag(r)->seq, v, [&] { return (seen = progress(r)) >= v; }, what);
  known_[r] = check_poison(r, seen, v, flag(r)->calls[sig_.call % kCallRing]);
  check_call(r, v, flag(r)->calls[sig_.call % kCallRing]);
}

void Team::wait_all(uint64_t v, const char* what) {
  for (int i = 1; i < size_; ++i) {
    int r = (rank_ + i) % size_;
    if (known_[r] >= v) continue;
    std::atomic<uint64_t>& w = flag(r)->seq;
    uint64_t seen = 0;
    try {
      wait_until(
          r, w, v, [&] { return (seen = w.load(std::memory_order_acquire)) >= v; }, what);
    } catch (const TimeoutError&) {
      // Name every rank still missing, not only the first.
      std::vector<int> missing;
      for (int j = 1; j < size_; ++j) {
        int q = (rank_ + j) % size_;
        if (flag(q)->seq.load(std::memory_order_acquire) < v) missing.push_back(q);
      }
      if (missing.empty()) missing.push_back(r);
      timeout(missing, v, what);
    }
    known_[r] = check_poison(r, seen, v, flag(r)->calls[sig_.call % kCallRing]);
    check_call(r, v, flag(r)->calls[sig_.call % kCallRing]);
  }
}

void Team::wait_small(int r, int p, uint64_t v, const char* what) {
  std::atomic<uint64_t>& w = slot(r, p)->seq;
  uint64_t seen = 0;
  wait_until(
      r, w, v, [&] { return (seen = w.load(std::memory_order_acquire)) >= v; }, what);
  known_[r] = std::max(known_[r], check_poison(r, seen, v, slot(r, p)->call));
  check_call(r, v, slot(r, p)->call);
}

void Team::wait_small_all(int p, uint64_t v, const char* what) {
  for (int i = 1; i < size_; ++i) {
    int r = (rank_ + i) % size_;
    try {
      wait_small(r, p, v, what);
    } catch (const TimeoutError&) {
      std::vector<int> missing;
      for (int j = 1; j < size_; ++j) {
        int q = (rank_ + j) % size_;
        if (slot(q, p)->seq.load(std::memory_order_acquire) < v) missing.push_back(q);
      }
      if (missing.empty()) missing.push_back(r);
      timeout(missing, v, what);
    }
  }
}

uint64_t Team::post_shared(int p) {
  SharedSlot* s = shared(rank_, p);
  s->sig = shared_sig_;
  s->seq.store(++phase_, std::memory_order_seq_cst);
  wake_sleepers(s->seq);
  shared_release_[p] = phase_ + 1;
  return phase_;
}

void Team::wait_shared_all(int p, uint64_t v, const char* what) {
  for (int i = 1; i < size_; ++i) {
    const int r = (rank_ + i) % size_;
    SharedSlot* s = shared(r, p);
    uint64_t seen = 0;
    try {
      wait_until(
          r, s->seq, v, [&] { return (seen = s->seq.load(std::memory_order_acquire)) >= v; }, what);
    } catch (const TimeoutError&) {
      std::vector<int> missing;
      for (int j = 1; j < size_; ++j) {
        const int q = (rank_ + j) % size_;
        if (shared(q, p)->seq.load(std::memory_order_acquire) < v) missing.push_back(q);
      }
      if (missing.empty()) missing.push_back(r);
      timeout(missing, v, what);
    }
    // The peer's CallSig is read from its flag line only when the short form differs.
    const uint64_t sig = s->sig;
    const CallSig& theirs = flag(r)->calls[(sig >> 32) % kCallRing];
    known_[r] = std::max(known_[r], check_poison(r, seen, v, theirs));
    if (sig != shared_sig_) {
      check_call(r, v, theirs);
    } else if (v > call_base_) {
      checked_[r] = sig_.call;
    }
  }
}

int Team::acquire_buf(const char* what) {
  int b = next_buf_;
  next_buf_ = next_buf_ + 1 == kBuffers ? 0 : next_buf_ + 1;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) wait_peer(r, buf_release_[b], what);
  }
  return b;
}

int Team::acquire_small(const char* what) {
  int p = next_small_;
  next_small_ = next_small_ + 1 == kSmallSlots ? 0 : next_small_ + 1;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) wait_peer(r, small_release_[p], what);
  }
  return p;
}

void Team::check_members(uint64_t v, const char* what) {
  // Every lost member, not only the first: one that failed on a loss and exited is lost too,
  // and the root cause is among the others.
  std::string lost = watch_->describe_failures(global_, [&](int g) {
    const int r = static_cast<int>(std::find(global_.begin(), global_.end(), g) - global_.begin());
    return "rank " + std::to_string(r) +
           (r != g ? " (global rank " + std::to_string(g) + ")" : std::string());
  });
  if (lost.empty()) return;
  broken_ = true;  // the ranks' steps no longer agree
  throw PeerError("shm_direct " + std::string(what) + ": rank " + std::to_string(rank_) + " of " +
                  std::to_string(size_) + " cannot complete its shared-memory collective #" +
                  std::to_string(sig_.call) + " (step " + std::to_string(v) + "): " + lost +
                  "; this group's shared-memory collectives are now unusable");
}

void Team::stop_here() { ::raise(SIGSTOP); }

void Team::timeout(const std::vector<int>& missing, uint64_t v, const char* what) {
  broken_ = true;
  std::string ranks, states;
  for (int r : missing) {
    ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    if (watch_ && static_cast<size_t>(r) < global_.size()) {
      std::string st = watch_->state(global_[static_cast<size_t>(r)]);
      if (!st.empty()) states += (states.empty() ? "" : "; ") + st;
    }
  }
  throw TimeoutError("shm_direct " + std::string(what) + ": rank " + std::to_string(rank_) +
                     " of " + std::to_string(size_) +
                     " timed out in its shared-memory collective #" + std::to_string(sig_.call) +
                     " waiting for rank" + (missing.size() > 1 ? "s " : " ") + ranks + " (step " +
                     std::to_string(v) + "); they did not arrive" +
                     (states.empty() ? "" : " (" + states + ")") +
                     ". Check that every rank of the group calls the same collective with "
                     "matching arguments, or raise the timeout");
}

}  // namespace tpcomm::coll::shm
