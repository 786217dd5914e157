// One shm connection: the ring we write (in a segment we created and passed to the peer), the
// ring we read (the peer's segment), and two unix sockets, one per direction, that carry the
// handshake and the doorbells and tell us at once when the peer's process dies.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>

#include "core/stage_policy.h"
#include "net/socket.h"
#include "tpcomm/transport/endpoint.hpp"
#include "transports/shm/ring.h"
#include "transports/shm/segment.h"
#include "transports/shm/wire.h"

namespace tpcomm::transport::shm {

class ShmTransport;

/// A put on its way: copied in bounded steps (CMA or ring chunks), then notified.
struct PutOp {
  uint64_t cookie = 0;
  const uint8_t* src = nullptr;
  size_t remaining = 0;
  size_t length = 0;
  uint64_t dst_addr = 0;    ///< CMA: the peer's address
  uint64_t region = 0;      ///< ring copy: the peer's region id
  uint64_t dst_offset = 0;  ///< ring copy: offset in that region
  uint32_t imm = 0;
  bool notified = false;
  int slot = -1;             ///< shared copy: the PutSlot both ends claim chunks from
  bool staged = false;       ///< shared copy through the staging area (kShareStaged)
  uint32_t filled = 0;       ///< staged: staging slots filled (the FIFO position)
  uint32_t own_pages = 0;    ///< staged: pages we wrote by cross-memory copies (not drained)
  uint32_t last_theirs = 0;  ///< staged: the receiver's pages in place when it last moved
  std::chrono::steady_clock::time_point theirs_moved{};  ///< staged: when it last moved
  bool claims_done = false;
  bool finisher = false;  ///< we completed the last chunk
};

/// A shared-copy put of the peer that we help with (pulling chunks) until none is left.
struct Helping {
  uint32_t slot = 0;
  uint32_t gen = 0;
  uint32_t chunks = 0;
  uint32_t imm = 0;
  uint64_t chunk_bytes = 0;
  uint64_t src = 0;
  uint8_t* dst = nullptr;
  uint64_t length = 0;
  bool staged = false;    ///< copied out of the sender's staging area (kShareStaged)
  uint32_t drained = 0;   ///< staged: staging slots drained (the FIFO position)
  uint32_t pull = 0;      ///< staged: pages to pull per claim when nothing is staged (0: never)
  bool stream = false;    ///< staged: copy out with streaming stores (a large put)
  bool finisher = false;  ///< we completed the last chunk (so we report the arrival)
};

class ShmEndpoint final : public Endpoint {
 public:
  ShmEndpoint(ShmTransport& transport, int peer) : t_(transport), peer_(peer) {}
  ~ShmEndpoint() override;

  int peer() const override { return peer_; }
  bool ready() const override;
  PostStatus send(std::span<const iovec> iov) override;
  PostStatus put(const MemoryRegion& src, size_t src_offset, const RemoteKey& dst,
                 size_t dst_offset, size_t length, uint32_t imm, uint64_t cookie) override;

 private:
  friend class ShmTransport;

  enum class OutState { None, Connecting, HelloSent, Accepted };

  /// Advances queued puts by at most one step's budget; false when blocked on ring space.
  void advance_puts();
  /// Writes `n` bytes of `op` from `src` to the peer's address `dst` (process_vm_writev);
  /// false after failing the endpoint with the reason.
  bool write_to_peer(const PutOp& op, const uint8_t* src, uint64_t dst, size_t n);
  /// Reads published records and reports them; returns the number of events.
  int poll_in(EventSink& sink);
  /// A put slot free for a new shared put, or -1.
  int free_slot() const;
  /// Announces a shared put in slot `k` (fields filled) with `mode`; false when the ring is
  /// full (then the put goes another way).
  bool announce_share(PutOp& op, int k, uint32_t mode);
  /// Starts a staged put when the staging area can be used and a slot is free; false leaves
  /// the put to cross-memory copies or the ring.
  bool try_stage(PutOp& op);
  /// Starts a shared-copy put when it qualifies and a slot is free (else plain CMA).
  void try_share(PutOp& op);
  /// Sender side of a shared-copy put: claims and writes chunks within `budget`.
  void advance_shared(PutOp& op, size_t& budget);
  /// Sender side of a staged put: fills free staging slots within `budget`.
  void advance_staged(PutOp& op, size_t& budget);
  /// Receiver side of a staged put: drains filled staging slots within `budget`, and pulls
  /// pages from the put's end while none is staged (h.pull); true once every page is in place
  /// (drained or pulled by us, or written by the sender).
  bool drain_staged(Helping& h, PutSlot& ps, size_t budget);
  /// Validates a PutShare record of the peer and queues it for helping.
  void accept_share(std::span<const uint8_t> payload);
  /// Receiver side: pulls chunks of the front shared put within one step's budget; reports
  /// the arrival when we completed its last chunk. Returns the number of events.
  int help(EventSink& sink);
  /// Rings the peer's doorbell (it is sleeping or asked for space).
  void ring_peer(int sock);
  bool unfenced_ = false;  ///< a send's doorbell check awaits the fenced pass
  /// ShmTransport::progress_rounds_ at this endpoint's last message (send's demotion).
  uint64_t demoted_round_ = ~uint64_t{0};
  /// "rank 3 (pid 1234)".
  std::string who() const;

  ShmTransport& t_;
  int peer_;

  // Our direction (we write, the peer reads).
  OutState out_state_ = OutState::None;
  net::Fd out_sock_;
  Segment out_seg_;
  RingProducer out_;
  PeerInfo info_;  ///< the peer's listening socket, probe word and instance
  bool have_info_ = false;
  pid_t pid_ = 0;     ///< the peer's pid as seen here (SO_PEERCRED)
  net::Fd pidfd_;     ///< polls readable when the peer's process exits
  bool cma_ = false;  ///< puts by process_vm_writev toward this peer
  std::chrono::steady_clock::time_point deadline_{};
  std::chrono::steady_clock::time_point next_try_{};

  // The peer's direction (it writes, we read).
  net::Fd in_sock_;
  Segment in_seg_;
  RingConsumer in_;
  bool in_attached_ = false;

  /// Whether our staging area toward the peer is claimed in /dev/shm (at the first staged
  /// put), or could not be (then large puts go by cross-memory copies or the ring).
  enum class Stage : uint8_t { Unclaimed, Ready, Unusable };
  Stage stage_ = Stage::Unclaimed;
  StagePolicy stage_policy_;  ///< cached or streaming stores into our staging area

  std::deque<PutOp> puts_;
  uint32_t slot_gen_[kPutSlots] = {};  // last generation used per slot (0: never)
  bool slot_busy_[kPutSlots] = {};     // a put of ours still uses the slot
  uint32_t next_gen_ = 1;
  std::deque<Helping> helping_;
  bool failed_ = false;
  bool bye_ = false;  ///< the peer announced a clean shutdown
};

}  // namespace tpcomm::transport::shm
