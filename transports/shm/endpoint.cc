// shm endpoint: posting into our ring, single-copy puts, and reading the peer's ring.
#include "transports/shm/endpoint.h"

#include <algorithm>
#include <cstring>

#include "core/cross_memory.h"
#include "core/log.h"
#include "transports/shm/device.h"
#include "transports/shm/memory_region.h"

namespace tpcomm::transport::shm {

ShmEndpoint::~ShmEndpoint() = default;

bool ShmEndpoint::ready() const {
  return !failed_ && out_state_ == OutState::Accepted && in_attached_;
}

std::string ShmEndpoint::who() const {
  std::string s = "rank " + std::to_string(peer_);
  pid_t pid = pid_ ? pid_ : static_cast<pid_t>(info_.pid);
  if (pid) s += " (pid " + std::to_string(pid) + ")";
  return s;
}

void ShmEndpoint::ring_peer(int sock) {
  if (sock < 0) return;
  uint8_t b = kDoorbell;
  // EAGAIN: the peer has unread doorbells already. EPIPE: it is gone; its socket's end of
  // stream reports that.
  (void)send_message(sock, {&b, 1});
}

PostStatus ShmEndpoint::send(std::span<const iovec> iov) {
  size_t total = 0;
  for (const iovec& v : iov) total += v.iov_len;
  if (total > t_.cfg_.max_message) {
    throw InvalidArgument("shm: message of " + std::to_string(total) + " bytes to rank " +
                          std::to_string(peer_) + " exceeds max_message (" +
                          std::to_string(t_.cfg_.max_message) + ")");
  }
  if (failed_) return PostStatus::PeerFailed;
  if (out_state_ != OutState::Accepted || !in_attached_) return PostStatus::NoResource;
  // The first message to this peer since this process last progressed (an answer, or one after
  // a pause) likely has a receiver polling for it: its record is demoted to the shared cache.
  // Messages sent back to back are not (the receiver reads those in a stream).
  bool demote = demoted_round_ != t_.progress_rounds_;
  demoted_round_ = t_.progress_rounds_;
  if (!out_.push(RecordType::Message, {}, iov, total, demote)) return PostStatus::NoResource;
  // The fence that orders our record before the receiver's "sleeping" flag would make the
  // sender wait for its record to reach the receiver's cache: a send costs that latency
  // twice. Check without it now (a receiver asleep for a while is seen), and fenced at the
  // next progress() or arm() (ShmTransport::check_unfenced), which the engine runs soon.
  if (out_.take_sleeper_unfenced()) {
    ring_peer(out_sock_.get());
  } else if (!unfenced_) {
    unfenced_ = true;
    t_.unfenced_.push_back(this);
    t_.note_busy();
  }
  return PostStatus::Ok;
}

PostStatus ShmEndpoint::put(const MemoryRegion& src, size_t src_offset, const RemoteKey& dst,
                            size_t dst_offset, size_t length, uint32_t imm, uint64_t cookie) {
  if (src_offset > src.length() || length > src.length() - src_offset) {
    throw InvalidArgument("shm: put to rank " + std::to_string(peer_) + ": source range [" +
                          std::to_string(src_offset) + ", +" + std::to_string(length) +
                          ") lies outside the registered region of " +
                          std::to_string(src.length()) + " bytes");
  }
  if (dst_offset > dst.length || length > dst.length - dst_offset) {
    throw InvalidArgument("shm: put to rank " + std::to_string(peer_) + ": destination range [" +
                          std::to_string(dst_offset) + ", +" + std::to_string(length) +
                          ") lies outside the remote region of " + std::to_string(dst.length) +
                          " bytes");
  }
  auto key = decode_key(dst);
  if (!key) {
    throw InvalidArgument("shm: put to rank " + std::to_string(peer_) +
                          ": the remote key is not an shm key (made by another transport?)");
  }
  if (failed_) return PostStatus::PeerFailed;
  if (out_state_ != OutState::Accepted || !in_attached_) return PostStatus::NoResource;
  if (key->instance != info_.instance) {
    throw InvalidArgument("shm: put to rank " + std::to_string(peer_) +
                          ": the remote key belongs to another process or transport instance");
  }
  PutOp op;
  op.cookie = cookie;
  op.src = static_cast<const uint8_t*>(src.addr()) + src_offset;
  op.remaining = op.length = length;
  op.dst_addr = dst.addr + dst_offset;
  op.region = key->region;
  op.dst_offset = dst_offset;
  op.imm = imm;
  puts_.push_back(op);
  ++t_.puts_pending_;
  t_.note_busy();
  if (t_.cfg_.shared_min > 0 && length >= t_.cfg_.shared_min && !try_stage(puts_.back()) && cma_) {
    try_share(puts_.back());
  }
  // The first step runs now: a put up to one step's size is done (and notified) before we
  // return; its completion is reported by the next progress().
  advance_puts();
  return PostStatus::Ok;
}

bool ShmEndpoint::write_to_peer(const PutOp& op, const uint8_t* src, uint64_t dst, size_t n) {
  int err = xmem::cross_memory_write(pid_, src, dst, n);
  if (err == 0) return true;
  t_.fail(*this, "shm: put of " + std::to_string(op.length) + " bytes to " + who() +
                     " failed: process_vm_writev: " + std::strerror(err) +
                     (err == ESRCH    ? " (the process is gone)"
                      : err == EFAULT ? " (the destination is no longer mapped there)"
                                      : ""));
  return false;
}

void ShmEndpoint::advance_puts() {
  size_t budget = t_.cfg_.put_chunk;
  bool rang = false;
  while (!puts_.empty() && !failed_) {
    PutOp& op = puts_.front();
    if (op.slot >= 0) {
      if (op.staged) {
        advance_staged(op, budget);
      } else {
        advance_shared(op, budget);
      }
      if (failed_) return;
      if (!op.claims_done) break;
      PutSlot& ps = put_slots(out_seg_.base())[op.slot];
      if (!op.finisher) {
        // The receiver copies its last chunks; it reports the arrival and wakes us.
        if (ps.done.load(std::memory_order_acquire) < ps.chunks) break;
        op.notified = true;
      }
      op.remaining = 0;
    }
    if (op.remaining > 0) {
      if (budget == 0) break;
      if (cma_) {
        size_t n = std::min(op.remaining, budget);
        if (!write_to_peer(op, op.src, op.dst_addr, n)) return;
        op.src += n;
        op.dst_addr += n;
        op.remaining -= n;
        budget -= n;
        if (op.remaining > 0) break;  // one step per call
      } else {
        // Copy through the ring: records of at most a quarter ring, pipelined with the
        // receiver, which copies each into the region it checked.
        size_t room = out_.max_payload() - sizeof(PutDataRecord);
        size_t n = std::min({op.remaining, room, budget});
        PutDataRecord rec{op.region, op.dst_offset, op.imm, 0};
        if (n == op.remaining) rec.flags = kPutDataLast;
        iovec v{const_cast<uint8_t*>(op.src), n};
        if (!out_.push(RecordType::PutData, {reinterpret_cast<const uint8_t*>(&rec), sizeof rec},
                       {&v, 1}, n)) {
          break;  // ring full: the receiver wakes us when it frees space
        }
        rang = rang || out_.take_sleeper();
        op.src += n;
        op.dst_offset += n;
        op.remaining -= n;
        budget -= n;
        if (op.remaining == 0) op.notified = true;  // the last chunk carried imm
        if (op.remaining > 0) continue;
      }
    }
    if (!op.notified) {
      PutNotifyRecord rec{op.imm, 0, op.length};
      if (!out_.push(RecordType::PutNotify, {reinterpret_cast<const uint8_t*>(&rec), sizeof rec},
                     {}, 0)) {
        break;
      }
      rang = rang || out_.take_sleeper();
      op.notified = true;
    }
    t_.events_.push_back({ShmTransport::Event::Kind::PutDone, peer_, op.cookie, true, {}});
    if (op.slot >= 0) slot_busy_[op.slot] = false;
    puts_.pop_front();
    --t_.puts_pending_;
  }
  if (rang) ring_peer(out_sock_.get());
}

int ShmEndpoint::poll_in(EventSink& sink) {
  if (!in_attached_) return 0;
  if (!in_.has_data()) {
    // Nothing new (most calls of a spinning wait): publish the read position that earlier
    // rounds left unpublished (see below).
    if (in_.unpublished() != 0 && in_.publish_head()) ring_peer(in_sock_.get());
    return 0;
  }
  int events = 0;
  RingRecord rec;
  std::string error;
  int budget = 0;
  for (; budget < 64; ++budget) {
    int r = in_.peek(&rec, &error);
    if (r == 0) break;
    if (r < 0) {
      t_.fail(*this, "shm: malformed record from " + who() + ": " + error);
      break;
    }
    // Consume before the callback (which may post); the sender reuses the space only once
    // the head is published, after the callbacks.
    in_.pop();
    ++events;
    switch (rec.type) {
      case RecordType::Message:
        // A message is often answered at once (a ping-pong, a rendezvous' CTS): start taking
        // the line our answer will go to now, while the engine handles this one (measured:
        // 8-byte one-way latency -7 to -9 ns, best and first quartile of 8 runs each).
        if (out_state_ == OutState::Accepted) out_.prefetch_next();
        sink.on_message(peer_, rec.payload);
        break;
      case RecordType::PutNotify: {
        PutNotifyRecord n;
        if (rec.payload.size() != sizeof n) {
          t_.fail(*this, "shm: malformed put notification from " + who());
          break;
        }
        std::memcpy(&n, rec.payload.data(), sizeof n);
        sink.on_put_arrived(peer_, n.imm);
        break;
      }
      case RecordType::PutData: {
        PutDataRecord d;
        if (rec.payload.size() < sizeof d) {
          t_.fail(*this, "shm: malformed put chunk from " + who());
          break;
        }
        std::memcpy(&d, rec.payload.data(), sizeof d);
        size_t n = rec.payload.size() - sizeof d;
        auto range = t_.regions_->find(d.region);
        if (!range || d.offset > range->length || n > range->length - d.offset) {
          t_.fail(*this, "shm: " + who() + " put " + std::to_string(n) + " bytes at offset " +
                             std::to_string(d.offset) + " into region " + std::to_string(d.region) +
                             (range ? " of " + std::to_string(range->length) + " bytes"
                                    : ", which is not registered here (deregistered?)"));
          break;
        }
        std::memcpy(range->addr + d.offset, rec.payload.data() + sizeof d, n);
        if (d.flags & kPutDataLast) {
          sink.on_put_arrived(peer_, d.imm);
        } else {
          --events;  // a chunk is not an event of its own
        }
        break;
      }
      case RecordType::PutShare:
        --events;  // the arrival is reported by help() or by the sender's PutNotify
        accept_share(rec.payload);
        break;
      case RecordType::Pad:
        break;
    }
    if (failed_) break;
  }
  // The read position is published (a store and a full fence, paired with the sender's
  // producer_waiting) lazily: by the next call that finds the ring empty, or here once a
  // quarter of the ring awaits it. A round that delivered a message skips it: on the latency
  // path its fence would sit between the arrival and the reply. A sender that finds the ring
  // full re-reads the head while it progresses; arm() publishes before this process sleeps.
  if (budget == 0 || in_.unpublished() >= in_.lines() / 4) {
    if (in_.publish_head()) ring_peer(in_sock_.get());
  }
  return events;
}

}  // namespace tpcomm::transport::shm
