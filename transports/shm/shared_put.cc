// shm puts that both ends copy at once (PutSlot in ring.h): staged through the sender's
// staging area (two user-space copies, one per core), or by cross-memory copies that either
// end claims chunk by chunk.
#include <algorithm>
#include <cstring>

#include "core/cross_memory.h"
#include "core/log.h"
#include "core/reduce.h"
#include "core/stream_copy.h"
#include "transports/shm/device.h"
#include "transports/shm/endpoint.h"
#include "transports/shm/memory_region.h"

namespace tpcomm::transport::shm {

int ShmEndpoint::free_slot() const {
  const PutSlot* slots = put_slots(out_seg_.base());
  for (size_t i = 0; i < kPutSlots; ++i) {
    if (slot_busy_[i]) continue;
    // Free once the receiver is finished with the slot's last put.
    if (slot_gen_[i] == 0 || slots[i].seen.load(std::memory_order_acquire) == slot_gen_[i]) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

namespace {

// Claims up to `want` of the pages left in a staged put's `claim` word: from the front (the
// sender) or from the end (the receiver). Returns the first page and the count, 0 when the two
// ends have met.
std::pair<uint32_t, uint32_t> claim_pages(std::atomic<uint64_t>& claim, uint32_t want,
                                          bool from_end) {
  uint64_t cur = claim.load(std::memory_order_relaxed);
  for (;;) {
    const uint32_t front = static_cast<uint32_t>(cur), end = static_cast<uint32_t>(cur >> 32);
    if (front >= end || want == 0) return {0, 0};
    const uint32_t n = std::min(want, end - front);
    const uint64_t next =
        from_end ? (uint64_t(end - n) << 32) | front : (uint64_t(end) << 32) | (front + n);
    if (claim.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
      return {from_end ? end - n : front, n};
    }
  }
}

}  // namespace

bool ShmEndpoint::announce_share(PutOp& op, int k, uint32_t mode) {
  PutSlot& ps = put_slots(out_seg_.base())[k];
  uint32_t gen = next_gen_++;
  if (next_gen_ == 0) next_gen_ = 1;
  // Cross-memory copies claim chunks by counting up in the low half; a staged put's pages
  // are claimed from both ends.
  ps.claim.store(mode == kShareStaged ? uint64_t(ps.chunks) << 32 : 0, std::memory_order_relaxed);
  ps.done.store(0, std::memory_order_relaxed);
  ps.gen = gen;
  ps.imm = op.imm;
  ps.region = op.region;
  ps.dst_offset = op.dst_offset;
  ps.length = op.length;
  PutShareRecord rec{static_cast<uint32_t>(k), gen, mode, 0};
  if (!out_.push(RecordType::PutShare, {reinterpret_cast<const uint8_t*>(&rec), sizeof rec}, {},
                 0)) {
    return false;
  }
  slot_gen_[k] = gen;
  slot_busy_[k] = true;
  op.slot = k;
  if (out_.take_sleeper()) ring_peer(out_sock_.get());
  return true;
}

bool ShmEndpoint::try_stage(PutOp& op) {
  if (out_.stage_slots() == 0 || stage_ == Stage::Unusable) return false;
  // With cross-memory access, one kernel copy beats two user copies while the data fits in
  // the caches: staging starts at TPCOMM_SHM_STAGE_MIN.
  if (cma_ && op.length < t_.cfg_.stage_min) return false;
  if (stage_ == Stage::Unclaimed) {
    // The area was left a hole when the ring was made: claim it now, or fall back for good.
    const size_t bytes = out_.stage_chunk() * out_.stage_slots();
    std::string why = out_seg_.reserve(out_.stage_offset(), bytes, t_.cfg_.dir,
                                       "the staging area toward " + who());
    if (!why.empty()) {
      stage_ = Stage::Unusable;
      TPLOG(WARN, SHM) << why << "; large puts to " << who() << " go by "
                       << (cma_ ? "cross-memory copies" : "copies through the ring");
      return false;
    }
    stage_ = Stage::Ready;
    stage_policy_ = StagePolicy(t_.cfg_.stage_stores);
  }
  const int k = free_slot();
  if (k < 0) return false;
  // Chunks of a sixteenth of the put, so that both copies overlap from the first chunks on,
  // up to a whole staging slot.
  const uint64_t chunk = std::min<uint64_t>(
      std::max<uint64_t>(op.length / 16 & ~uint64_t(4095), 64 << 10), out_.stage_chunk());
  const uint64_t pages = (op.length + kStagePage - 1) / kStagePage;
  if (pages > UINT32_MAX / 2) return false;
  PutSlot& ps = put_slots(out_seg_.base())[k];
  ps.chunks = static_cast<uint32_t>(pages);
  ps.chunk_bytes = static_cast<uint32_t>(chunk);
  // Where we may write into the receiver, it may read from us: it pulls pages from the end
  // while it waits for ours (TPCOMM_SHM_STAGE_PULL on its side).
  ps.src = cma_ ? reinterpret_cast<uint64_t>(op.src) : 0;
  if (!announce_share(op, k, kShareStaged)) return false;
  op.staged = true;
  return true;
}

// How long the receiver may leave a full staging area undrained before the sender writes
// chunks itself: about ten chunk copies. A receiver that runs drains a 1 MiB chunk in
// ~100 us; one that is not scheduled leaves it for milliseconds.
constexpr auto kStageStall = std::chrono::milliseconds(1);

void ShmEndpoint::advance_staged(PutOp& op, size_t& budget) {
  PutSlot& ps = put_slots(out_seg_.base())[op.slot];
  StageSlot* slots = stage_slots(out_seg_.base());
  const uint64_t chunk = ps.chunk_bytes;
  const uint32_t nslots = out_.stage_slots();
  while (!op.claims_done && budget > 0) {
    const uint32_t s = op.filled % nslots;
    const bool free = slots[s].chunk.load(std::memory_order_acquire) == 0;
    if (!free) {
      // The area is full: wait for the receiver while it drains, write straight into the
      // destination once it has stopped for kStageStall. Only the receiver's own progress
      // counts (not the pages we write), so that once it has stopped we write chunk after
      // chunk until it drains again.
      const auto now = std::chrono::steady_clock::now();
      const uint32_t theirs = ps.done.load(std::memory_order_acquire) - op.own_pages;
      if (theirs != op.last_theirs || op.theirs_moved == std::chrono::steady_clock::time_point{}) {
        op.last_theirs = theirs;
        op.theirs_moved = now;
      }
      if (!cma_ || now - op.theirs_moved < kStageStall) break;
    }
    // The next pages from the front (the receiver may have taken the last ones from the end).
    const auto [first, n] = claim_pages(ps.claim, static_cast<uint32_t>(chunk / kStagePage), false);
    if (n == 0) {
      op.claims_done = true;
      break;
    }
    const uint64_t off = uint64_t(first) * kStagePage;
    const size_t bytes =
        static_cast<size_t>(std::min<uint64_t>(uint64_t(n) * kStagePage, op.length - off));
    if (free) {
      // Cached or streaming stores (then fenced inside copy_bytes, before the release below),
      // as the policy learns from whole chunks.
      stage_policy_.write(bytes, bytes == chunk, [&](bool nt) {
        copy_bytes(out_.stage() + size_t(s) * chunk, op.src + off, bytes, nt);
      });
      slots[s].pages = n;
      slots[s].chunk.store(first + 1, std::memory_order_release);
      ++op.filled;
    } else {
      if (!write_to_peer(op, op.src + off, op.dst_addr + off, bytes)) return;
      op.own_pages += n;
      if (ps.done.fetch_add(n, std::memory_order_acq_rel) + n == ps.chunks) op.finisher = true;
    }
    budget -= std::min(budget, bytes);
  }
}

bool ShmEndpoint::drain_staged(Helping& h, PutSlot& ps, size_t budget) {
  StageSlot* slots = stage_slots(in_seg_.base());
  const uint8_t* stage = in_.stage();
  const uint32_t nslots = in_.stage_slots();
  while (budget > 0) {
    const uint32_t s = h.drained % nslots;
    const uint32_t c = slots[s].chunk.load(std::memory_order_acquire);
    if (c != 0) {
      // Once every page of this put is in place, what is staged belongs to the sender's next
      // put (it starts that one only then): leave it to that put's turn.
      if (ps.done.load(std::memory_order_acquire) >= h.chunks) break;
      const uint32_t n = slots[s].pages;
      if (n == 0 || c - 1 > h.chunks || n > h.chunks - (c - 1) ||
          uint64_t(n) * kStagePage > h.chunk_bytes) {
        t_.fail(*this, "shm: " + who() + " staged pages [" + std::to_string(c - 1) + ", +" +
                           std::to_string(n) + ") of a put of " + std::to_string(h.chunks) +
                           " pages in a slot of " + std::to_string(h.chunk_bytes) + " bytes");
        return false;
      }
      const uint64_t off = uint64_t(c - 1) * kStagePage;
      const size_t bytes =
          static_cast<size_t>(std::min<uint64_t>(uint64_t(n) * kStagePage, h.length - off));
      copy_bytes(h.dst + off, stage + size_t(s) * h.chunk_bytes, bytes, h.stream);
      slots[s].chunk.store(0, std::memory_order_release);
      ++h.drained;
      if (ps.done.fetch_add(n, std::memory_order_acq_rel) + n == h.chunks) h.finisher = true;
      budget -= std::min(budget, bytes);
      continue;
    }
    // Nothing staged: rather than wait for the sender's slower copy, pull pages from the end
    // of the put (the sender takes them from the front; the two meet). Not while puts of our
    // own are under way (both directions at once): then this CPU has no idle time to fill,
    // and a kernel copy costs it more per byte than the staged copies it would displace.
    if (t_.puts_pending_ > 0) break;
    const auto [first, n] = claim_pages(ps.claim, h.pull, true);
    if (n == 0) break;
    const uint64_t off = uint64_t(first) * kStagePage;
    const size_t bytes =
        static_cast<size_t>(std::min<uint64_t>(uint64_t(n) * kStagePage, h.length - off));
    int err = xmem::cross_memory_read(pid_, h.dst + off, h.src + off, bytes);
    if (err != 0) {
      t_.fail(*this, "shm: pulling " + std::to_string(bytes) + " bytes of a staged put from " +
                         who() + " failed: process_vm_readv: " + std::strerror(err));
      return false;
    }
    if (ps.done.fetch_add(n, std::memory_order_acq_rel) + n == h.chunks) h.finisher = true;
    budget -= std::min(budget, bytes);
  }
  return ps.done.load(std::memory_order_acquire) >= h.chunks;
}

void ShmEndpoint::try_share(PutOp& op) {
  const int k = free_slot();
  if (k < 0) return;
  // Chunks small enough that both ends get several, large enough to amortise the claims.
  uint64_t chunk = std::clamp<uint64_t>(op.length / 16, 256 << 10, 4 << 20) & ~uint64_t(4095);
  uint64_t chunks = (op.length + chunk - 1) / chunk;
  if (chunks > UINT32_MAX / 2) return;
  PutSlot& ps = put_slots(out_seg_.base())[k];
  ps.chunks = static_cast<uint32_t>(chunks);
  ps.chunk_bytes = static_cast<uint32_t>(chunk);
  ps.src = reinterpret_cast<uint64_t>(op.src);
  // A full ring leaves this one to a plain cross-memory write.
  (void)announce_share(op, k, kShareCross);
}

void ShmEndpoint::advance_shared(PutOp& op, size_t& budget) {
  PutSlot& ps = put_slots(out_seg_.base())[op.slot];
  while (!op.claims_done && budget > 0) {
    uint32_t i = static_cast<uint32_t>(ps.claim.fetch_add(1, std::memory_order_relaxed));
    if (i >= ps.chunks) {
      op.claims_done = true;
      break;
    }
    uint64_t off = uint64_t(i) * ps.chunk_bytes;
    size_t n = static_cast<size_t>(std::min<uint64_t>(ps.chunk_bytes, op.length - off));
    if (!write_to_peer(op, op.src + off, op.dst_addr + off, n)) return;
    if (ps.done.fetch_add(1, std::memory_order_acq_rel) + 1 == ps.chunks) op.finisher = true;
    budget -= std::min(budget, n);
  }
}

void ShmEndpoint::accept_share(std::span<const uint8_t> payload) {
  PutShareRecord rec;
  if (payload.size() != sizeof rec) {
    t_.fail(*this, "shm: malformed shared-put record from " + who());
    return;
  }
  std::memcpy(&rec, payload.data(), sizeof rec);
  if (rec.slot >= kPutSlots || rec.mode > kShareStaged) {
    t_.fail(*this, "shm: shared put from " + who() + " names slot " + std::to_string(rec.slot) +
                       " in mode " + std::to_string(rec.mode));
    return;
  }
  PutSlot& ps = put_slots(in_seg_.base())[rec.slot];
  Helping h;
  h.slot = rec.slot;
  h.gen = rec.gen;
  h.chunks = ps.chunks;
  h.imm = ps.imm;
  h.chunk_bytes = ps.chunk_bytes;
  h.src = ps.src;
  h.length = ps.length;
  h.staged = rec.mode == kShareStaged;
  // Pull pages ourselves while nothing is staged, where the sender lets us read its memory.
  if (h.staged && cma_ && h.src != 0) {
    h.pull = static_cast<uint32_t>(std::min<uint64_t>(t_.cfg_.stage_pull / kStagePage, h.chunks));
  }
  // A large put's result leaves the caches (streaming stores), as a large reduction's does.
  h.stream = h.staged && h.length >= kernels::nt_threshold();
  uint64_t region = ps.region, offset = ps.dst_offset;
  auto range = t_.regions_->find(region);
  // Cross-memory copies count chunks, staged puts pages.
  const uint64_t unit = h.staged ? kStagePage : h.chunk_bytes;
  bool ok = ps.gen == rec.gen && h.chunk_bytes > 0 && h.chunks > 0 &&
            h.chunks == (h.length + unit - 1) / unit &&
            (!h.staged || (in_.stage_slots() > 0 && h.chunk_bytes <= in_.stage_chunk() &&
                           h.chunk_bytes % kStagePage == 0));
  if (!ok || !range || offset > range->length || h.length > range->length - offset) {
    t_.fail(*this, "shm: " + who() + " shares a put of " + std::to_string(h.length) +
                       " bytes at offset " + std::to_string(offset) + " of region " +
                       std::to_string(region) +
                       (!ok     ? " with an inconsistent slot"
                        : range ? " of " + std::to_string(range->length) + " bytes"
                                : ", which is not registered here (deregistered?)"));
    return;
  }
  h.dst = range->addr + offset;
  helping_.push_back(h);
}

int ShmEndpoint::help(EventSink& sink) {
  if (helping_.empty() || failed_) return 0;
  Helping& h = helping_.front();
  PutSlot& ps = put_slots(in_seg_.base())[h.slot];
  size_t budget = t_.cfg_.put_chunk;
  if (h.staged && !drain_staged(h, ps, budget)) return 0;  // more next time
  bool claims_done = h.staged || !cma_;  // without CMA toward the peer we only watch
  while (!claims_done && budget > 0) {
    uint32_t i = static_cast<uint32_t>(ps.claim.fetch_add(1, std::memory_order_relaxed));
    if (i >= h.chunks) {
      claims_done = true;
      break;
    }
    uint64_t off = uint64_t(i) * h.chunk_bytes;
    size_t n = static_cast<size_t>(std::min<uint64_t>(h.chunk_bytes, h.length - off));
    int err = xmem::cross_memory_read(pid_, h.dst + off, h.src + off, n);
    if (err != 0) {
      t_.fail(*this, "shm: pulling " + std::to_string(n) + " bytes of a put from " + who() +
                         " failed: process_vm_readv: " + std::strerror(err));
      return 0;
    }
    if (ps.done.fetch_add(1, std::memory_order_acq_rel) + 1 == h.chunks) h.finisher = true;
    budget -= std::min(budget, n);
  }
  if (!claims_done) return 0;  // more next time
  uint32_t imm = h.imm;
  bool finisher = h.finisher;
  ps.seen.store(h.gen, std::memory_order_release);
  helping_.pop_front();
  if (!finisher) return 0;  // the sender completes it and sends PutNotify
  sink.on_put_arrived(peer_, imm);
  ring_peer(in_sock_.get());  // the sender waits for the last chunk
  return 1;
}

}  // namespace tpcomm::transport::shm
