// The ucx transport's endpoint posts (send, put) and memory registration; see
// ucx_transport.h and docs/transport.md.
#include <cstring>

#include "core/log.h"
#include "tpcomm/error.hpp"
#include "transports/ucx/ucx_internal.h"
#include "transports/ucx/ucx_transport.h"

namespace tpcomm::ucx {

using transport::PostStatus;

size_t UcxEndpoint::checked_message_size(std::span<const iovec> iov) const {
  size_t total = 0;
  for (const iovec& v : iov) total += v.iov_len;
  if (total > t_.caps_.max_message)
    throw InvalidArgument("ucx transport: message of " + std::to_string(total) + " bytes to rank " +
                          std::to_string(peer_) + " exceeds max_message " +
                          std::to_string(t_.caps_.max_message));
  return total;
}

void UcxEndpoint::check_data_range(const transport::MemoryRegion& src, size_t src_offset,
                                   size_t length) const {
  if (src_offset > src.length() || length > src.length() - src_offset)
    throw InvalidArgument("ucx transport: tagged data range [" + std::to_string(src_offset) +
                          ", +" + std::to_string(length) + ") outside the registered " +
                          std::to_string(src.length()) + " bytes");
}

PostStatus UcxEndpoint::send(std::span<const iovec> iov) {
  checked_message_size(iov);
  return t_.send_tagged(*this, pool_tag(kKindMsg, t_.ctx_.rank), iov, nullptr);
}

PostStatus UcxEndpoint::put(const transport::MemoryRegion& src, size_t src_offset,
                            const transport::RemoteKey& dst, size_t dst_offset, size_t length,
                            uint32_t imm, uint64_t cookie) {
  if (src_offset > src.length() || length > src.length() - src_offset)
    throw InvalidArgument("ucx transport: put source range [" + std::to_string(src_offset) + ", +" +
                          std::to_string(length) + ") outside the registered " +
                          std::to_string(src.length()) + " bytes");
  if (dst_offset > dst.length || length > dst.length - dst_offset)
    throw InvalidArgument("ucx transport: put target range [" + std::to_string(dst_offset) + ", +" +
                          std::to_string(length) + ") outside rank " + std::to_string(peer_) +
                          "'s region of " + std::to_string(dst.length) + " bytes");
  if (failed_) return PostStatus::PeerFailed;
  if (t_.live_.size() >= t_.max_live_) return PostStatus::NoResource;
  const UcpLib& u = t_.u_;
  const uint8_t* from = static_cast<const uint8_t*>(src.addr()) + src_offset;
  uint64_t to = dst.addr + dst_offset;
  // ucp_put_nbx where UCX puts natively: over an RDMA lane (rma_), or into memory it maps here
  // (the peer's allocate_memory over shared memory, whatever the endpoint's lanes).
  const RKey* rk = nullptr;
  if (length > 0 && dst.blob_size > 0) {
    rk = &rkey_of(dst);
    if (rk->rkey == nullptr && rma_)
      throw InvalidArgument("ucx transport: the remote key from rank " + std::to_string(peer_) +
                            " was refused by UCX");
    if (!rma_ && !rk->mapped) rk = nullptr;
  }
  if (rk != nullptr || (rma_ && length == 0)) {
    if (length > 0) {
      ucp_request_param_t prm{};
      void* req = u.ucp_put_nbx(ep_, from, length, to, rk->rkey, &prm);
      if (UCS_PTR_IS_ERR(req)) {
        t_.on_ep_error(*this, UCS_PTR_STATUS(req));
        return PostStatus::PeerFailed;
      }
      if (req != nullptr) u.ucp_request_free(req);  // released by UCX when done
    }
    // The notification goes once the put is complete at the target (flush), so the bytes
    // are visible when on_put_arrived runs there.
    Req* r = t_.new_req();
    r->kind = Req::Flush;
    r->peer = peer_;
    r->imm = imm;
    r->cookie = cookie;
    r->has_cookie = true;
    ++rma_in_flight_;
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send = send_cb;
    prm.user_data = r;
    void* req = u.ucp_ep_flush_nbx(ep_, &prm);
    if (UCS_PTR_IS_ERR(req)) {
      --rma_in_flight_;
      t_.release(r);
      t_.on_ep_error(*this, UCS_PTR_STATUS(req));
      return PostStatus::PeerFailed;
    }
    if (req == nullptr)
      t_.completed_.push_back(r);
    else
      r->ucx = req;
    return PostStatus::Ok;
  }
  // Tag mode: a header into the peer's pool, then the data as one tagged message that the
  // peer receives directly into the region (UCX rendezvous: zero-copy on both sides).
  uint32_t id = t_.next_put_id_++ & 0x0fffffffu;
  if (id == 0) id = t_.next_put_id_++ & 0x0fffffffu;
  uint8_t hdr[kPutHdrSize];
  uint64_t len64 = length;
  std::memcpy(hdr, &to, 8);
  std::memcpy(hdr + 8, &len64, 8);
  std::memcpy(hdr + 16, &imm, 4);
  std::memcpy(hdr + 20, &id, 4);
  iovec v{hdr, sizeof hdr};
  Req* hr = nullptr;
  if (length == 0) {
    hr = t_.new_req();
    hr->kind = Req::PutHdr;
    hr->cookie = cookie;
    hr->has_cookie = true;
  }
  PostStatus ps = t_.send_tagged(*this, pool_tag(kKindPutHdr, t_.ctx_.rank), {&v, 1}, hr);
  if (ps != PostStatus::Ok || length == 0) return ps;
  Req* r = t_.new_req();
  r->kind = Req::PutData;
  ++t_.transfers_;
  r->peer = peer_;
  r->cookie = cookie;
  r->has_cookie = true;
  ucp_request_param_t prm{};
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  prm.cb.send = send_cb;
  prm.user_data = r;
  // The header went out: on failure the peer learns of it through the broken endpoint.
  file_data_send(r, u.ucp_tag_send_nbx(ep_, from, length, data_tag(id, t_.ctx_.rank), &prm));
  return PostStatus::Ok;  // a failure is reported through on_put_done(cookie, false)
}

const UcxEndpoint::RKey& UcxEndpoint::rkey_of(const transport::RemoteKey& dst) {
  std::vector<uint8_t> blob(dst.blob_data, dst.blob_data + dst.blob_size);
  auto it = rkeys_.find(blob);
  if (it != rkeys_.end()) return it->second;
  const UcpLib& u = t_.u_;
  // A mapped key keeps the peer's segment attached here (and so alive, even once the peer
  // freed it) until the key is destroyed: those are dropped after kMaxMappedKeys.
  if ((rkeys_.size() >= 1024 || mapped_keys_ >= kMaxMappedKeys) && rma_in_flight_ == 0) {
    for (auto& [b, k] : rkeys_)
      if (k.rkey) u.ucp_rkey_destroy(k.rkey);
    rkeys_.clear();
    mapped_keys_ = 0;
  }
  RKey k;
  if (u.ucp_ep_rkey_unpack(ep_, dst.blob_data, &k.rkey) != UCS_OK) {
    k.rkey = nullptr;
  } else {
    void* local = nullptr;
    k.mapped = u.ucp_rkey_ptr(k.rkey, dst.addr, &local) == UCS_OK && local != nullptr;
    if (k.mapped) ++mapped_keys_;
    if (k.mapped) {
      TPLOG(INFO, UCX) << "rank " << t_.ctx_.rank << ": rank " << peer_ << "'s region at 0x"
                       << std::hex << dst.addr << std::dec
                       << " is mapped here: puts into it go by ucp_put_nbx";
    }
  }
  return rkeys_.emplace(std::move(blob), k).first->second;
}

void UcxEndpoint::file_data_send(Req* r, void* req) {
  if (UCS_PTR_IS_ERR(req)) {
    r->status = UCS_PTR_STATUS(req);
    t_.on_ep_error(*this, r->status);
  }
  if (req == nullptr || UCS_PTR_IS_ERR(req))
    t_.completed_.push_back(r);
  else
    r->ucx = req;
}

Req* UcxEndpoint::new_data_send(uint64_t cookie) {
  Req* r = t_.new_req();
  r->kind = Req::PutData;
  ++t_.transfers_;
  ++t_.moved_rounds_;  // a transfer starts: transferring() (and so arm()) polls while it does
  r->peer = peer_;
  r->cookie = cookie;
  r->has_cookie = true;
  return r;
}

PostStatus UcxEndpoint::send_tagged(const transport::MemoryRegion& src, size_t src_offset,
                                    size_t length, uint64_t id, uint64_t cookie) {
  check_data_range(src, src_offset, length);
  if (failed_) return PostStatus::PeerFailed;
  if (t_.live_.size() >= t_.max_live_) return PostStatus::NoResource;
  Req* r = new_data_send(cookie);
  ucp_request_param_t prm{};
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  prm.cb.send = send_cb;
  prm.user_data = r;
  // Synchronous: done only once the peer has matched the data (received it, or dropped it
  // after refusing the message), never merely because UCX buffered it; a refusal's CTS,
  // sent before the peer drops the data, reaches us before this completes.
  const uint8_t* from = static_cast<const uint8_t*>(src.addr()) + src_offset;
  file_data_send(
      r, t_.u_.ucp_tag_send_sync_nbx(ep_, from, length, tagged_tag(id, t_.ctx_.rank), &prm));
  return PostStatus::Ok;  // a failure is reported through on_put_done(cookie, false)
}

// ---- memory ------------------------------------------------------------------------------

UcxRegion::UcxRegion(UcxTransport& t, void* addr, size_t length, Device device)
    : MemoryRegion(addr, length, device), t_(t) {
  key_.addr = reinterpret_cast<uintptr_t>(addr);
  key_.length = length;
  // Tag-mode puts need no rkey: while no endpoint puts by ucp_put_nbx (no RDMA lane, or
  // TPCOMM_UCX_PUT=tag) no ucp_mem_map per rendezvous. (A region without a key that an RMA
  // endpoint targets later is reached by tagged messages: the blob is empty.)
  if (length == 0 || (t.opt_.put != PutMode::Rma && t.rma_endpoints_ == 0)) return;
  const UcpLib& u = t.u_;
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = addr;
  mp.length = length;
  ucs_status_t st = u.ucp_mem_map(t.context_, &mp, &memh_);
  if (st != UCS_OK)
    throw TransportError("ucx transport: ucp_mem_map of " + std::to_string(length) +
                         " bytes failed: " + status_text(u, st));
  pack_key();
}

UcxRegion::UcxRegion(UcxTransport& t, ucp_mem_h memh, void* addr, size_t length)
    : MemoryRegion(addr, length, Device::cpu()), t_(t), memh_(memh) {
  key_.addr = reinterpret_cast<uintptr_t>(addr);
  key_.length = length;
  pack_key();
}

void UcxRegion::pack_key() {
  const UcpLib& u = t_.u_;
  void* packed = nullptr;
  size_t size = 0;
  ucs_status_t st = u.ucp_rkey_pack(t_.context_, memh_, &packed, &size);
  if (st != UCS_OK) {
    u.ucp_mem_unmap(t_.context_, memh_);
    throw TransportError("ucx transport: ucp_rkey_pack failed: " + status_text(u, st));
  }
  // A key larger than the blob leaves it empty: peers then put by tagged messages.
  if (!key_.set_blob({static_cast<const uint8_t*>(packed), size})) {
    TPLOG(INFO, UCX) << "packed UCX rkey of " << size << " bytes exceeds "
                     << transport::RemoteKey::kMaxBlob << "; puts into it go as tagged messages";
  }
  u.ucp_rkey_buffer_release(packed);
}

UcxRegion::~UcxRegion() {
  uintptr_t a = key_.addr, end = key_.addr + key_.length;
  // Receives of tag-mode puts and tagged data still aimed at this memory are withdrawn.
  for (Req* r : t_.live_)
    if (r->kind == Req::DataRecv && r->ucx && r->addr >= a && r->addr < end)
      t_.u_.ucp_request_cancel(t_.worker_, r->ucx);
  auto range = t_.regions_.equal_range(a);
  for (auto it = range.first; it != range.second; ++it)
    if (it->second == end) {
      t_.regions_.erase(it);
      break;
    }
  if (memh_) t_.u_.ucp_mem_unmap(t_.context_, memh_);
}

std::unique_ptr<transport::MemoryRegion> UcxTransport::register_memory(void* addr, size_t length,
                                                                       Device device) {
  if (device.type != DeviceType::CPU)
    throw NotSupportedError("ucx transport: registration of " + device.str() +
                            " memory is not supported (host memory only)");
  auto r = std::make_unique<UcxRegion>(*this, addr, length, device);
  uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  regions_.emplace(a, a + length);
  return r;
}

std::unique_ptr<transport::MemoryRegion> UcxTransport::allocate_memory(size_t length,
                                                                       Device device) {
  if (device.type != DeviceType::CPU)
    throw NotSupportedError("ucx transport: allocating " + device.str() +
                            " memory is not supported (host memory only)");
  if (length == 0) return register_memory(nullptr, 0, device);
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                  UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  mp.address = nullptr;
  mp.length = length;
  mp.flags = UCP_MEM_MAP_ALLOCATE;
  ucp_mem_h memh = nullptr;
  ucs_status_t st = u_.ucp_mem_map(context_, &mp, &memh);
  if (st != UCS_OK)
    throw TransportError("ucx transport: allocating " + std::to_string(length) +
                         " bytes with ucp_mem_map failed: " + status_text(u_, st));
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  st = u_.ucp_mem_query(memh, &attr);
  if (st != UCS_OK || attr.address == nullptr || attr.length < length) {
    u_.ucp_mem_unmap(context_, memh);
    throw TransportError("ucx transport: ucp_mem_query of an allocation of " +
                         std::to_string(length) + " bytes failed: " + status_text(u_, st));
  }
  // The region is the length asked for (UCX may round the allocation up).
  auto r = std::make_unique<UcxRegion>(*this, memh, attr.address, length);
  uintptr_t a = reinterpret_cast<uintptr_t>(attr.address);
  regions_.emplace(a, a + length);
  return r;
}

}  // namespace tpcomm::ucx
