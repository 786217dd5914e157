// The ucx transport's tagged data (Capabilities::tagged_data): the receive side
// (recv_tagged, discard_tagged) and the data that travels with its protocol message as one
// active message (Endpoint::send_tagged_with_message: UCX's rendezvous RTS carries the
// message, and the receiver holds UCX's descriptor until the protocol takes or drops the data).
// See docs/transport.md.
#include <cstring>

#include "core/log.h"
#include "tpcomm/error.hpp"
#include "transports/ucx/ucx_internal.h"
#include "transports/ucx/ucx_transport.h"

namespace tpcomm::ucx {

using transport::PostStatus;

void am_data_cb(void* /*request*/, ucs_status_t status, size_t length, void* user) {
  Req* r = static_cast<Req*>(user);
  r->status = status;
  r->info.length = length;
  r->t->push_completed(r);
}

ucs_status_t am_tagged_cb(void* arg, const void* header, size_t header_length, void* data,
                          size_t length, const ucp_am_recv_param_t* param) {
  return static_cast<UcxTransport*>(arg)->on_tagged_am(header, header_length, data, length,
                                                       param->recv_attr);
}

// ---- the sender -------------------------------------------------------------------------

PostStatus UcxEndpoint::send_tagged_with_message(std::span<const iovec> message,
                                                 const transport::MemoryRegion& src,
                                                 size_t src_offset, size_t length, uint64_t id,
                                                 uint64_t cookie) {
  const size_t total = checked_message_size(message);
  check_data_range(src, src_offset, length);
  if (failed_) return PostStatus::PeerFailed;
  // To a peer that does not take the active message (its address says so), or a message too
  // large for UCX's header: the message, then the data, as two sends. Both or neither: with
  // room for both checked first, the message cannot go alone (and be sent again on a retry).
  if (!am_ || t_.max_am_header_ < kAmTaggedHdr + total) {
    if (t_.live_.size() + 2 > t_.max_live_ || t_.buffered_bytes_ + total > kMaxBuffered)
      return PostStatus::NoResource;
    PostStatus ps = send(message);
    if (ps != PostStatus::Ok) return ps;
    return send_tagged(src, src_offset, length, id, cookie);
  }
  if (t_.live_.size() >= t_.max_live_) return PostStatus::NoResource;
  Req* r = new_data_send(cookie);
  // The header stays in the request until the send completes.
  r->buf.resize(kAmTaggedHdr + total);
  int32_t rank = t_.ctx_.rank;
  uint32_t id32 = static_cast<uint32_t>(id & 0x3fffffffu);
  std::memcpy(r->buf.data(), &rank, 4);
  std::memcpy(r->buf.data() + 4, &id32, 4);
  size_t at = kAmTaggedHdr;
  for (const iovec& v : message) {
    if (v.iov_len) std::memcpy(r->buf.data() + at, v.iov_base, v.iov_len);
    at += v.iov_len;
  }
  ucp_request_param_t prm{};
  prm.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  // Always UCX's rendezvous: the send completes only once the receiver took the data (or
  // dropped it), as the synchronous tagged send does.
  prm.flags = UCP_AM_SEND_FLAG_RNDV;
  prm.cb.send = send_cb;
  prm.user_data = r;
  const uint8_t* from = static_cast<const uint8_t*>(src.addr()) + src_offset;
  file_data_send(r, t_.u_.ucp_am_send_nbx(ep_, kAmTaggedId, r->buf.data(), r->buf.size(), from,
                                          length, &prm));
  return PostStatus::Ok;  // a failure is reported through on_put_done(cookie, false)
}

// ---- the receiver -----------------------------------------------------------------------

ucs_status_t UcxTransport::on_tagged_am(const void* header, size_t header_length, void* data,
                                        size_t length, uint64_t recv_attr) {
  int32_t peer = -1;
  uint32_t id = 0;
  if (header_length >= kAmTaggedHdr) {
    std::memcpy(&peer, header, 4);
    std::memcpy(&id, static_cast<const uint8_t*>(header) + 4, 4);
  }
  if (header_length < kAmTaggedHdr || peer < 0 || peer >= ctx_.world_size || closing_) {
    if (!closing_) {
      TPLOG(WARN, UCX) << "rank " << ctx_.rank << ": dropped an active message with tagged data ("
                       << header_length << "-byte header, rank " << peer << " of "
                       << ctx_.world_size << ")";
    }
    return UCS_OK;  // UCX drops it (a rendezvous: its ATS completes the sender's send)
  }
  // Only a rendezvous descriptor is kept (the sender forces rendezvous); data UCX delivered
  // eagerly is copied, since UCX 1.13 frees an eager descriptor only inside the callback.
  const bool kept = (recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  Req* r = new_req();
  r->kind = Req::TaggedRts;
  r->peer = peer;
  r->cookie = id;
  r->expect = length;
  const auto* h = static_cast<const uint8_t*>(header);
  r->buf.assign(h + kAmTaggedHdr, h + header_length);
  if (kept) {
    r->addr = reinterpret_cast<uintptr_t>(data);
  } else {
    r->copy.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + length);
  }
  completed_.push_back(r);
  return kept ? UCS_INPROGRESS : UCS_OK;
}

void UcxTransport::release_held(Held& h) {
  if (h.desc != nullptr) u_.ucp_am_data_release(worker_, h.desc);
  h.desc = nullptr;
}

void UcxTransport::release_held_of(int peer) {
  for (auto it = held_.begin(); it != held_.end();) {
    if (peer < 0 || static_cast<int>(it->first >> 32) == peer) {
      release_held(it->second);
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
}

void UcxTransport::hold_tagged(Req* r, transport::EventSink& sink, int& events) {
  Held h;
  h.desc = reinterpret_cast<void*>(r->addr);
  h.length = r->expect;
  h.copy.swap(r->copy);
  if (reported_.count(r->peer)) {
    release_held(h);
    return;
  }
  auto [it, fresh] = held_.try_emplace(held_key(r->peer, r->cookie), std::move(h));
  if (!fresh) {
    // The earlier data under this id stays held (its RTS is with the protocol already); the
    // new one goes back (try_emplace left `h` as it was).
    release_held(h);
    errors_.emplace_back(r->peer, "ucx: rank " + std::to_string(r->peer) + " sent tagged data " +
                                      std::to_string(r->cookie) +
                                      " while data under that id was still held; link closed");
    return;
  }
  // Held before the message is reported: the protocol may take the data from on_message.
  sink.on_message(r->peer, {r->buf.data(), r->buf.size()});
  ++events;
}

void UcxTransport::recv_tagged(int peer, uint64_t id, const transport::MemoryRegion& dst,
                               size_t offset, size_t length, uint32_t imm) {
  if (offset > dst.length() || length > dst.length() - offset)
    throw InvalidArgument("ucx transport: tagged receive range [" + std::to_string(offset) + ", +" +
                          std::to_string(length) + ") outside the registered " +
                          std::to_string(dst.length()) + " bytes");
  uintptr_t to = reinterpret_cast<uintptr_t>(dst.addr()) + offset;
  // The data comes now (it follows its RTS): transferring() polls while it starts.
  ++moved_rounds_;
  auto it = held_.find(held_key(peer, id));
  if (it == held_.end()) {  // sent as a tagged message (TPCOMM_UCX_TAGGED=tag at the sender)
    post_data_recv(peer, imm, to, length, tagged_tag(id, peer));
    return;
  }
  Held h = std::move(it->second);
  held_.erase(it);
  if (h.length != length) {
    release_held(h);
    errors_.emplace_back(peer, "ucx: tagged data " + std::to_string(id) + " from rank " +
                                   std::to_string(peer) + " is " + std::to_string(h.length) +
                                   " bytes, its RTS said " + std::to_string(length) +
                                   "; link closed");
    return;
  }
  Req* r = new_data_recv(peer, imm, to, length);
  if (h.desc == nullptr) {  // UCX delivered the bytes with the message
    if (length) std::memcpy(reinterpret_cast<void*>(to), h.copy.data(), length);
    completed_.push_back(r);
    return;
  }
  ucp_request_param_t prm{};
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  prm.cb.recv_am = am_data_cb;
  prm.user_data = r;
  // UCX owns the descriptor from here, whatever the outcome.
  void* req = u_.ucp_am_recv_data_nbx(worker_, h.desc, reinterpret_cast<void*>(to), length, &prm);
  if (UCS_PTR_IS_ERR(req)) r->status = UCS_PTR_STATUS(req);
  if (req == nullptr || UCS_PTR_IS_ERR(req))
    completed_.push_back(r);
  else
    r->ucx = req;
}

void UcxTransport::discard_tagged(int peer, uint64_t id) {
  auto it = held_.find(held_key(peer, id));
  if (it != held_.end()) {
    release_held(it->second);
    held_.erase(it);
    return;
  }
  // A receive into a few scratch bytes: UCX truncates the message (and, for its rendezvous,
  // acknowledges it to the sender without moving the data); the outcome is not reported.
  Req* r = new_req();
  r->kind = Req::Discard;
  r->peer = peer;
  ucp_request_param_t prm{};
  prm.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  prm.cb.recv = recv_cb;
  prm.user_data = r;
  void* req = u_.ucp_tag_recv_nbx(worker_, discard_buf_, sizeof discard_buf_, tagged_tag(id, peer),
                                  ~0ull, &prm);
  if (req == nullptr || UCS_PTR_IS_ERR(req))
    completed_.push_back(r);
  else
    r->ucx = req;
}

}  // namespace tpcomm::ucx
