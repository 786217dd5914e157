// The per-peer half of the link layer: two-sided messages over the peer's pre-posted bounce
// buffers, one-sided put with a 32-bit notification (RDMA write with immediate), and the
// event sink through which Transport::progress() reports what happened.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "tpcomm/error.hpp"
#include "tpcomm/transport/memory.hpp"

namespace tpcomm::transport {

/// Outcome of posting an operation. NoResource is back-pressure, not an error: no credit,
/// ring slot or send-queue entry is free (or the connection is still being set up); the
/// caller keeps the operation pending and retries after a later progress() (UCX
/// UCS_ERR_NO_RESOURCE). PeerFailed: the connection is broken; the reason is reported once
/// through EventSink::on_peer_error.
enum class PostStatus : uint8_t { Ok, NoResource, PeerFailed };

/// Implemented by the protocol; Transport::progress() calls it. Callbacks run on the thread
/// that called progress(). They may post on any endpoint (a reply, a put) but must not call
/// progress() again. Peers are the job's global ranks.
class EventSink {
 public:
  virtual ~EventSink() = default;
  /// An eager message from `peer`. `data` lives in a bounce buffer that the transport
  /// reposts (returns to the peer's credit pool) when this returns: copy what you keep.
  virtual void on_message(int peer, std::span<const uint8_t> data) = 0;
  /// Every byte of a put from `peer` that carried `imm` is visible in local memory.
  virtual void on_put_arrived(int peer, uint32_t imm) = 0;
  /// The local put posted with `cookie` finished: its source may be reused (ok) or it failed
  /// (!ok; the peer error follows through on_peer_error).
  virtual void on_put_done(uint64_t cookie, bool ok) = 0;
  /// The connection to `peer` is broken (closed, reset, refused handshake, failed QP).
  /// Reported once per peer; later posts to it return PeerFailed.
  virtual void on_peer_error(int peer, const std::string& reason) = 0;
};

/// A connection to one peer, owned by its Transport. Not thread-safe: the protocol engine
/// serialises every call on a transport and its endpoints (UCX's serialized thread mode).
class Endpoint {
 public:
  virtual ~Endpoint() = default;

  /// The peer's global rank.
  virtual int peer() const = 0;

  /// True once the connection is established (posts return NoResource before).
  virtual bool ready() const = 0;

  /// Sends one message gathered from `iov` (total <= Capabilities::max_message, else
  /// InvalidArgument). Buffered-copy semantics: on Ok the bytes were copied into transport
  /// memory (or the wire) and `iov` may be reused at once. Messages on one endpoint arrive
  /// in order. With Capabilities::recv_slots > 0 each message consumes one of the peer's
  /// pre-posted bounce buffers, and the caller must hold a credit for it.
  [[nodiscard]] virtual PostStatus send(std::span<const iovec> iov) = 0;

  /// Writes `length` bytes from `src` at `src_offset` into the peer's region described by
  /// `dst` at `dst_offset`, then notifies the peer with `imm` (on_put_arrived) once all bytes
  /// are visible there. Zero-copy where the transport allows. Completion is reported locally
  /// through on_put_done(cookie). The ranges must lie inside `src` and `dst`
  /// (InvalidArgument otherwise). length may be 0 (a pure notification). With recv_slots > 0
  /// the notification consumes a bounce buffer too (RDMA write with immediate consumes a
  /// receive), so a put needs a credit like a message.
  [[nodiscard]] virtual PostStatus put(const MemoryRegion& src, size_t src_offset,
                                       const RemoteKey& dst, size_t dst_offset, size_t length,
                                       uint32_t imm, uint64_t cookie) = 0;

  /// Optional one-sided read (RDMA read, ucp_get_nbx); Capabilities::native_get says whether
  /// it exists. Completion through on_put_done(cookie); no notification at the peer.
  [[nodiscard]] virtual PostStatus get(const MemoryRegion& /*dst*/, size_t /*dst_offset*/,
                                       const RemoteKey& /*src*/, size_t /*src_offset*/,
                                       size_t /*length*/, uint64_t /*cookie*/) {
    throw NotSupportedError("this transport has no one-sided get; use put");
  }

  /// Optional (Capabilities::tagged_data): sends `length` bytes of `src` at `src_offset` as
  /// tagged data under `id`, which the peer receives with Transport::recv_tagged (or drops
  /// with discard_tagged) whenever it gets to it. Zero-copy where the transport allows, so
  /// `src` must stay untouched until on_put_done(cookie): that comes once the peer has taken
  /// the data (a synchronous send; ok), or the send failed (!ok). The transport keeps the id's
  /// low 30 bits: a sender must not reuse an id while its data is still in flight.
  [[nodiscard]] virtual PostStatus send_tagged(const MemoryRegion& /*src*/, size_t /*src_offset*/,
                                               size_t /*length*/, uint64_t /*id*/,
                                               uint64_t /*cookie*/) {
    throw NotSupportedError("this transport does not match tagged data itself");
  }

  /// Optional (Capabilities::tagged_data_with_message): send_tagged() with `message` carried
  /// in the same transfer (UCX: inside its rendezvous RTS), instead of a send() of the
  /// message and then the data, one small message less per transfer. The peer's sink gets
  /// on_message(message) once the data can be taken with recv_tagged / discard_tagged under
  /// `id`; the message follows the size limit of send() (InvalidArgument), but may arrive out
  /// of order with the messages of send(). Completion and the id as for send_tagged().
  [[nodiscard]] virtual PostStatus send_tagged_with_message(std::span<const iovec> /*message*/,
                                                            const MemoryRegion& /*src*/,
                                                            size_t /*src_offset*/,
                                                            size_t /*length*/, uint64_t /*id*/,
                                                            uint64_t /*cookie*/) {
    throw NotSupportedError("this transport cannot carry a message with tagged data");
  }
};

}  // namespace tpcomm::transport
