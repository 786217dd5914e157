// The single-producer single-consumer message ring of one direction (sender -> receiver),
// living in a segment created by the sender and mapped by both. Records are variable-length,
// start on a cache line and never wrap (a pad record fills the end of the ring). Each record
// header carries a stamp derived from its absolute position, written last with release
// semantics, so the receiver polls the very line that holds an 8-byte message: one cache-line
// transfer per small message. The receiver publishes its read position (head) on its own line;
// the sender reads it only when the ring looks full.
//
// Wake-ups: the receiver sets `consumer_sleeping` before blocking; a sender that sees it after
// publishing a record rings the receiver's doorbell. A sender that finds the ring full sets
// `producer_waiting`; the receiver that frees space then rings the sender's doorbell. Both are
// Dekker-style flag/data handshakes with a full fence on each side.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace tpcomm::transport::shm {

inline constexpr size_t kLine = 64;
/// The ring's data starts one page into the segment; the page before holds the header.
inline constexpr size_t kRingHeaderBytes = 4096;
inline constexpr uint64_t kSegmentMagic = 0x3130474e52485054ull;  // "TPHRNG01"
inline constexpr uint32_t kSegmentVersion = 3;  // 2: staging area; 3: staged puts by pages

/// Record types.
enum class RecordType : uint16_t {
  Pad = 1,        ///< filler up to the end of the ring
  Message = 2,    ///< an eager message (payload = the bytes)
  PutNotify = 3,  ///< a put's data is in place; payload = PutNotify
  PutData = 4,    ///< a chunk of a put copied through the ring; payload = PutData + bytes
  PutShare = 5,   ///< a put both ends copy (see PutSlot); payload = PutShareRecord
};

/// Record header, at the start of a cache line.
struct RecordHeader {
  std::atomic<uint64_t> stamp;  ///< (position + 1) ^ salt, stored last (release)
  uint16_t type;
  uint16_t flags;
  uint32_t length;  ///< payload bytes after the header
};
inline constexpr size_t kRecordHeaderBytes = sizeof(RecordHeader);
static_assert(kRecordHeaderBytes == 16);

/// Payload of PutNotify.
struct PutNotifyRecord {
  uint32_t imm;
  uint32_t reserved;
  uint64_t length;  ///< bytes the put wrote (for logs)
};

/// Payload prefix of PutData (the bytes follow). The last chunk carries kPutDataLast and the
/// notification value.
struct PutDataRecord {
  uint64_t region;  ///< region id of the receiver's key
  uint64_t offset;  ///< from the region's start
  uint32_t imm;
  uint32_t flags;
};
inline constexpr uint32_t kPutDataLast = 1;

/// How the two ends of a shared put copy it.
inline constexpr uint32_t kShareCross = 0;   ///< cross-memory chunks claimed by either end
inline constexpr uint32_t kShareStaged = 1;  ///< through the staging area (see PutSlot)

/// Payload of PutShare: which slot of the sender's segment describes the put, and how.
struct PutShareRecord {
  uint32_t slot;
  uint32_t gen;
  uint32_t mode;  ///< kShareCross or kShareStaged
  uint32_t reserved;
};

/// A large cross-memory put that both ends copy at once: the sender writes chunks into the
/// receiver (process_vm_writev) while the receiver pulls chunks from the sender
/// (process_vm_readv); each claims the next chunk by incrementing the low half of `claim`,
/// counts it in `done` once copied, and whoever completes the last chunk reports the put (the
/// receiver: arrival; the sender: a PutNotify). Slots live in the sender's header page; the
/// sender reuses one only after the receiver stored its generation in `seen`.
///
/// A staged put (kShareStaged) goes through the staging area after the sender's ring: the
/// sender copies the put's pages in order, a chunk at a time, into the next staging slot (a
/// FIFO of stage_slots slots, each described by a StageSlot), and the receiver copies them out
/// into the destination: two user-space copies that run at once on both cores, the middle one
/// out of the shared cache, faster than a kernel copy over 4 KiB pages, and no cross-memory
/// access needed. The sender's copy is the slower of the two (its source comes from memory),
/// so a receiver with cross-memory access that finds no chunk staged pulls pages from the end
/// of the put itself (process_vm_readv, `src` set) instead of waiting: the two ends claim
/// pages from opposite ends of `claim` (low half: the next page from the front, high half:
/// the end of the pages left) until they meet. When the receiver stops draining (not
/// scheduled, busy elsewhere) while the area is full, the sender writes its chunks straight
/// into the destination with process_vm_writev instead, so a put never waits for the
/// receiver's CPU where cross-memory access works. `chunks` counts the put's 4 KiB pages and
/// `done` those in place (drained, pulled or written).
struct alignas(kLine) PutSlot {
  std::atomic<uint64_t> claim;  // both: see above
  std::atomic<uint32_t> done;   // both: chunks (staged: pages) copied
  std::atomic<uint32_t> seen;   // receiver: the generation it is finished with
  uint32_t gen;                 // the fields below are written by the sender before the record
  uint32_t chunks;
  uint32_t imm;
  uint32_t chunk_bytes;
  uint64_t src;         // sender's address (staged: 0 when the receiver may not pull)
  uint64_t region;      // receiver's region id
  uint64_t dst_offset;  // in that region
  uint64_t length;
};
static_assert(sizeof(PutSlot) == kLine);
inline constexpr size_t kPutSlots = 32;
inline constexpr size_t kPutSlotOffset = 512;
static_assert(kPutSlotOffset + kPutSlots * sizeof(PutSlot) <= 4096);
/// A staged put's unit of claims: the pages of its source and destination.
inline constexpr uint64_t kStagePage = 4096;

/// A staging slot's state: 0 when free, else the first page + 1 of the `pages` it holds. The
/// sender stores it (release) after copying the pages in; the receiver clears it (release)
/// after copying them out.
struct alignas(kLine) StageSlot {
  std::atomic<uint32_t> chunk;
  uint32_t pages;
};
inline constexpr size_t kMaxStageSlots = 16;
inline constexpr size_t kStageSlotOffset = kPutSlotOffset + kPutSlots * sizeof(PutSlot);
static_assert(kStageSlotOffset + kMaxStageSlots * sizeof(StageSlot) <= 4096);

/// The staging slot states of a ring segment mapped at `base`.
inline StageSlot* stage_slots(uint8_t* base) {
  return reinterpret_cast<StageSlot*>(base + kStageSlotOffset);
}

/// The put slots of a ring segment mapped at `base`.
inline PutSlot* put_slots(uint8_t* base) {
  return reinterpret_cast<PutSlot*>(base + kPutSlotOffset);
}

/// The header page of a ring segment. Lines are separated so that the receiver's writes
/// (head, sleeping) never share a line with the sender's.
struct alignas(kLine) RingControl {
  // Line 0: written once by the sender before the segment is passed on.
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes;
  uint64_t ring_bytes;
  uint64_t salt;
  int32_t src_rank;
  int32_t dst_rank;
  uint32_t stage_slots;                       ///< staging slots after the ring (0: none)
  uint64_t stage_chunk;                       ///< bytes per staging slot
  alignas(kLine) std::atomic<uint64_t> head;  // receiver: lines consumed
  alignas(kLine) std::atomic<uint32_t> consumer_sleeping;  // receiver sets, sender clears
  alignas(kLine) std::atomic<uint32_t> producer_waiting;   // sender sets, receiver clears
};
static_assert(sizeof(RingControl) <= kPutSlotOffset);

/// Segment bytes needed for a ring of `ring_bytes` data bytes followed by `stage_bytes` of
/// staging area.
inline size_t ring_segment_bytes(size_t ring_bytes, size_t stage_bytes = 0) {
  return kRingHeaderBytes + ring_bytes + stage_bytes;
}
/// Largest staging area a segment may announce.
inline constexpr size_t kMaxStageBytes = size_t{1} << 30;

/// Largest payload a ring of `ring_bytes` accepts in one record (a quarter of it, so that
/// several records are in flight).
inline size_t ring_max_payload(size_t ring_bytes) { return ring_bytes / 4 - kRecordHeaderBytes; }

/// The sending side of a ring.
class RingProducer {
 public:
  RingProducer() = default;
  /// Initialises the header of a fresh (zeroed) segment at `base`, whose ring is followed by
  /// `stage_slots` staging slots of `stage_chunk` bytes (none when 0).
  void init(uint8_t* base, size_t ring_bytes, uint64_t salt, int src_rank, int dst_rank,
            size_t stage_chunk = 0, uint32_t stage_slots = 0);

  /// Copies `iov` (total `length` bytes, at most max_payload(), `prefix` first when not
  /// empty) into one record of `type` and publishes it. False when the ring has no room
  /// (then producer_waiting is set, so the receiver wakes us when it frees space).
  /// `demote`: a record of up to kDemoteLines lines is then moved to the shared cache once
  /// published (ring.cc), for a receiver that is polling for it.
  bool push(RecordType type, std::span<const uint8_t> prefix, std::span<const iovec> iov,
            size_t length, bool demote = false);
  /// True when a record of `payload` bytes fits now.
  bool fits(size_t payload);
  /// True when the receiver announced it is going to sleep (and clears the flag): the caller
  /// rings its doorbell. Includes the fence that pairs with the receiver's arm().
  bool take_sleeper();
  /// The same without the fence: true only when the receiver's flag is already visible.
  /// False proves nothing; take_sleeper() must follow before this process stops progressing.
  bool take_sleeper_unfenced() {
    if (ctl_->consumer_sleeping.load(std::memory_order_relaxed) == 0) return false;
    return ctl_->consumer_sleeping.exchange(0, std::memory_order_acq_rel) != 0;
  }
  /// Arms the "wake me when space frees" flag and reports whether space is free already.
  bool space_or_arm(size_t payload);
  size_t max_payload() const { return max_payload_; }
  RingControl* control() const { return ctl_; }
  /// The staging area after the ring (null when the segment has none), its geometry, and
  /// its offset in the segment.
  uint8_t* stage() const { return stage_slots_ ? data_ + lines_ * kLine : nullptr; }
  size_t stage_chunk() const { return stage_chunk_; }
  uint32_t stage_slots() const { return stage_slots_; }
  size_t stage_offset() const { return kRingHeaderBytes + lines_ * kLine; }
  /// Asks for the line of the next record in exclusive state, once per record position, so
  /// that a push soon after (a reply to the message just received) finds it owned instead of
  /// waiting for the receiver's copy to be invalidated first. A hint: no effect on contents.
  void prefetch_next() {
    if (data_ == nullptr || prefetched_ == tail_ + 1) return;
    prefetched_ = tail_ + 1;
    const uint8_t* line = data_ + tail_idx_ * kLine;
#if defined(__x86_64__) || defined(__i386__)
    asm volatile("prefetchw %0" : : "m"(*line));
#elif defined(__aarch64__)
    asm volatile("prfm pstl1keep, %0" : : "Q"(*line));
#else
    (void)line;
#endif
  }

 private:
  RingControl* ctl_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t lines_ = 0;
  uint64_t prefetched_ = 0;   // tail_ + 1 at the last prefetch_next() (0: none)
  uint64_t tail_ = 0;         // lines published
  uint64_t tail_idx_ = 0;     // tail_ % lines_
  uint64_t cached_head_ = 0;  // receiver's head as last read
  uint64_t salt_ = 0;
  size_t max_payload_ = 0;
  size_t stage_chunk_ = 0;
  uint32_t stage_slots_ = 0;
};

/// Where the receiver's next record will appear, readable from any thread without the
/// receiver's serialization (ShmTransport::maybe_pending): the address of the stamp at the
/// read position and the value it will hold. The consumer updates it whenever its read
/// position moves. A reader may see the two from different moments; that makes it answer
/// "nothing yet" once more (the stamp of one position never equals another's value), which
/// the next look corrects.
struct RingProbe {
  std::atomic<const std::atomic<uint64_t>*> stamp{nullptr};
  std::atomic<uint64_t> expect{0};
  /// True when a record is published at the read position the probe last heard of.
  bool ready() const noexcept {
    const std::atomic<uint64_t>* s = stamp.load(std::memory_order_acquire);
    if (s == nullptr) return false;
    uint64_t want = expect.load(std::memory_order_relaxed);
    return s->load(std::memory_order_relaxed) == want;
  }
};

/// A record as seen by the receiver (valid until pop()).
struct RingRecord {
  RecordType type;
  uint16_t flags;
  std::span<const uint8_t> payload;
};

/// The receiving side of a ring.
class RingConsumer {
 public:
  RingConsumer() = default;
  /// Checks the header written by the sender of a segment of `segment_bytes` at `base`
  /// (ring, then the staging area it announces). Returns "" or what is wrong with it.
  std::string attach(uint8_t* base, size_t segment_bytes, int src_rank, int dst_rank);

  /// The next record, if one is published: 1 (in *out), 0 (none), -1 (malformed: *error says
  /// why; the connection must be dropped).
  int peek(RingRecord* out, std::string* error);
  /// Releases the record returned by peek() back to the sender.
  void pop();
  /// Cheap check whether a record is published (for arm(), and poll_in's first look).
  bool has_data() const {
    const auto* h = reinterpret_cast<const RecordHeader*>(data_ + head_idx_ * kLine);
    return h->stamp.load(std::memory_order_acquire) == ((head_ + 1) ^ salt_);
  }
  /// Publishes the read position and reports whether the sender asked to be woken (and
  /// clears that request): the caller rings its doorbell.
  bool publish_head();
  /// Lines consumed but not yet published (poll_in publishes lazily: see there).
  uint64_t unpublished() const { return head_ - published_; }
  uint64_t lines() const { return lines_; }
  /// Sets / clears the consumer_sleeping flag (arm() sets it, progress after a sleep clears).
  void set_sleeping(bool on);
  size_t max_payload() const { return max_payload_; }
  /// The sender's staging area (null when it has none) and its geometry.
  const uint8_t* stage() const { return stage_slots_ ? data_ + lines_ * kLine : nullptr; }
  size_t stage_chunk() const { return stage_chunk_; }
  uint32_t stage_slots() const { return stage_slots_; }
  /// Keeps `probe` (memory that outlives this consumer's use, or null) pointing at the read
  /// position from now on.
  void set_probe(RingProbe* probe) {
    if (probe_ != nullptr) probe_->stamp.store(nullptr, std::memory_order_relaxed);
    probe_ = probe;
    update_probe();
  }

 private:
  void update_probe() {
    if (probe_ == nullptr || data_ == nullptr) return;
    probe_->stamp.store(&reinterpret_cast<const RecordHeader*>(data_ + head_idx_ * kLine)->stamp,
                        std::memory_order_relaxed);
    probe_->expect.store((head_ + 1) ^ salt_, std::memory_order_relaxed);
  }

  RingProbe* probe_ = nullptr;
  RingControl* ctl_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t lines_ = 0;
  uint64_t head_ = 0;           // lines consumed locally
  uint64_t head_idx_ = 0;       // head_ % lines_
  uint64_t published_ = 0;      // head as published
  uint64_t pending_lines_ = 0;  // lines of the record returned by peek()
  uint64_t salt_ = 0;
  size_t max_payload_ = 0;
  size_t stage_chunk_ = 0;
  uint32_t stage_slots_ = 0;
};

}  // namespace tpcomm::transport::shm
