// The ibverbs transport: see ibv_transport.h and docs/ibverbs.md.
#include "transports/ibverbs/ibv_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "core/log.h"
#include "tpcomm/error.hpp"
#include "transports/ibverbs/ibv_internal.h"
#include "transports/ibverbs/probe.h"

namespace tpcomm::ibv {
namespace {

std::string advice(ibv_wc_status s, bool roce) {
  std::string r;
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
      r = "the peer did not acknowledge within TPCOMM_IB_TIMEOUT x (TPCOMM_IB_RETRY_CNT + 1): "
          "it died, or the path is broken";
      if (roce)
        r += " (RoCE: check that both ends use the same GID type with TPCOMM_IB_GID_INDEX, "
             "the MTU of the path, and PFC/ECN on the switches)";
      return r;
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "the peer had no receive posted (a credit accounting bug)";
    case IBV_WC_REM_ACCESS_ERR:
      return "the peer refused the remote key or range (a freed or deregistered buffer?)";
    case IBV_WC_LOC_PROT_ERR:
      return "a local buffer is not registered with this protection domain";
    default:
      return roce ? "RoCE: check TPCOMM_IB_GID_INDEX, the MTU and PFC" : "";
  }
}

}  // namespace

/// A registered user region (a held registration-cache entry: an MR per rail); the key's blob
/// holds the rkey of every rail, rail order.
class IbvRegion : public transport::MemoryRegion {
 public:
  IbvRegion(RegCache::Ref ref, void* addr, size_t len)
      : MemoryRegion(addr, len, Device::cpu()), ref_(std::move(ref)) {}
  transport::RemoteKey remote_key() const override {
    transport::RemoteKey k;
    k.addr = reinterpret_cast<uint64_t>(addr());
    k.length = length();
    std::vector<uint8_t> b;
    const RegCache::Entry* e = ref_.entry();
    size_t n = e != nullptr ? e->mrs.size() : 1;
    for (size_t i = 0; i < n; ++i) {
      uint32_t rkey = e != nullptr ? e->mrs[i]->rkey : 0;
      put_le(b, rkey);
    }
    k.set_blob(b);
    return k;
  }
  uint32_t lkey(size_t rail) const {
    const RegCache::Entry* e = ref_.entry();
    return e != nullptr && rail < e->mrs.size() ? e->mrs[rail]->lkey : 0;
  }

 private:
  RegCache::Ref ref_;
};

namespace {}  // namespace

// ---- transport ---------------------------------------------------------------------------------

IbvTransport::IbvTransport(const transport::TransportContext& ctx, const Options& o)
    : ctx_(ctx), o_(o), lib_(load_verbs(o.library)) {
  if (o_.fork_safe) {
    // Must precede every other verbs call of the process to protect all registrations.
    int rc = lib_.fork_init != nullptr ? lib_.fork_init() : ENOSYS;
    if (rc != 0)
      throw NotSupportedError(
          "ibverbs transport: TPCOMM_IB_FORK_SAFE=1 but ibv_fork_init "
          "failed: " +
          errno_text(rc) + " (call it before any other verbs use, or unset the variable)");
  }
  std::string why;
  std::vector<PortInfo> chosen = choose_local_rails(usable_ports(lib_, o_), o_.max_rails, &why);
  try {
    for (const PortInfo& p : chosen) rails_.push_back(open_rail(lib_, p, o_, this));
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0)
      throw NotSupportedError("ibverbs transport: epoll_create1 failed: " + errno_text(errno));
    for (size_t i = 0; i < rails_.size(); ++i) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = i;
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, rails_[i].channel->fd, &ev);
    }
    open_doorbell();
  } catch (...) {
    for (Rail& r : rails_) close_rail(lib_, r);
    if (epoll_fd_ >= 0) close(epoll_fd_);
    if (bell_fd_ >= 0) close(bell_fd_);
    throw;
  }
  std::vector<ibv_pd*> pds;
  for (Rail& r : rails_) pds.push_back(r.pd);
  cache_ = std::make_unique<RegCache>(lib_, pds, o_.reg_cache_entries, where());
  const Rail& r0 = rails_.front();
  job_hash_ = fnv1a(ctx.job_id);
  put_le(address_, kAddrMagic);
  put_le(address_, kVersion);
  put_le(address_, static_cast<uint8_t>(r0.port.attr.link_layer));
  put_le(address_, static_cast<uint8_t>(r0.port.attr.active_mtu));
  put_le(address_, static_cast<int32_t>(ctx.rank));
  put_le(address_, r0.port.attr.lid);
  put_le(address_, static_cast<uint16_t>(rails_.size()));
  put_le(address_, job_hash_);
  address_.insert(address_.end(), r0.gid.raw, r0.gid.raw + 16);
  std::string cache_why;
  bool caching = cache_->caching(&cache_why);
  TPLOG(INFO, IBVERBS) << "rank " << ctx.rank << ": ibverbs on " << where() << " ("
                       << (r0.port.roce() ? "RoCE" : "InfiniBand") << ", MTU "
                       << mtu_bytes(r0.port.attr.active_mtu) << ", GID index " << r0.gid_index
                       << ", " << port_gbps(r0.port.attr) << " Gb/s"
                       << (rails_.size() > 1 ? ", " + std::to_string(rails_.size()) + " rails" : "")
                       << (why.empty() ? "" : ": " + why) << "); registration cache "
                       << (caching ? "on" : "off (" + cache_why + ")");
}

IbvTransport::~IbvTransport() {
  for (auto& [peer, ep] : eps_) destroy_endpoint(*ep);
  eps_.clear();
  cache_.reset();
  for (Rail& r : rails_) close_rail(lib_, r);
  close(epoll_fd_);
  if (bell_fd_ >= 0) close(bell_fd_);
}

void IbvTransport::destroy_endpoint(IbvEndpoint& ep) {
  for (size_t i = 0; i < ep.qps_.size(); ++i) {
    rails_[i / ep.qpr_].by_qpn.erase(ep.qps_[i]->qp_num);
    lib_.destroy_qp(ep.qps_[i]);
  }
  ep.qps_.clear();
  if (ep.recv_.mr) lib_.dereg_mr(ep.recv_.mr), ep.recv_.mr = nullptr;
  if (ep.send_.mr) lib_.dereg_mr(ep.send_.mr), ep.send_.mr = nullptr;
}

std::string IbvTransport::where() const {
  std::string w;
  for (const Rail& r : rails_) w += (w.empty() ? "" : "+") + r.where();
  return w;
}

transport::Capabilities IbvTransport::capabilities() const {
  transport::Capabilities c;
  c.reach = transport::Reach::Network;
  c.native_put = true;
  c.max_message = kMaxMessage;
  const ibv_port_attr& a = rails_.front().port.attr;
  c.max_put = a.max_msg_sz > 0 ? a.max_msg_sz : (1u << 30);
  // Several rails: the protocol splits transfers into stripes, spread over the rails.
  if (rails_.size() > 1) c.max_put = std::min(c.max_put, o_.stripe_size);
  c.recv_slots = kSlots;
  c.rndv_threshold = 32768;
  c.latency_us = 2.0;
  double gbps = 0;
  for (const Rail& r : rails_) gbps += port_gbps(r.port.attr);
  c.bandwidth_gbps = std::max(1.0, gbps / 8.0);
  return c;
}

int IbvTransport::wait_fd() const { return epoll_fd_; }

void IbvTransport::fail(IbvEndpoint& ep, const std::string& reason) {
  if (ep.state_ == IbvEndpoint::State::Failed) return;
  ep.state_ = IbvEndpoint::State::Failed;
  ep.failure_ = reason;
  failures_.push_back({ep.peer_, reason});
  for (ibv_qp* q : ep.qps_) {  // flush what is posted: pending puts complete as failed
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    lib_.modify_qp(q, &a, IBV_QP_STATE);
  }
  TPLOG(WARN, IBVERBS) << "rank " << ctx_.rank << ": " << reason;
}

int IbvTransport::report_failures(transport::EventSink& sink) {
  int n = 0;
  while (!failures_.empty()) {
    auto f = failures_.front();
    failures_.erase(failures_.begin());
    sink.on_peer_error(f.first, f.second);
    ++n;
  }
  return n;
}

int IbvTransport::handle(size_t rail, const ibv_wc& wc, transport::EventSink& sink) {
  uint64_t kind = kind_of(wc.wr_id);
  auto qit = rails_[rail].by_qpn.find(wc.qp_num);
  IbvEndpoint* ep = qit == rails_[rail].by_qpn.end() ? nullptr : qit->second.first;
  if (kind == kPutKind) {
    auto pit = puts_.find(wc.wr_id & ((1ull << 62) - 1));
    if (pit != puts_.end()) {
      uint64_t cookie = pit->second.first;
      if (pit->second.second) pit->second.second->puts_in_flight_--;
      puts_.erase(pit);
      sink.on_put_done(cookie, wc.status == IBV_WC_SUCCESS);
    }
  }
  if (ep == nullptr) return 1;
  if (wc.status != IBV_WC_SUCCESS) {
    if (ep->state_ != IbvEndpoint::State::Failed) {
      const char* op = kind == kPutKind    ? "RDMA write with immediate"
                       : kind == kSendKind ? "send"
                                           : "receive";
      fail(*ep, "ibverbs: rank " + std::to_string(ep->peer_) + " via " + where(rail) + " (QP " +
                    std::to_string(wc.qp_num) + "): " + op +
                    " failed: " + lib_.wc_status_str(wc.status) + " (status " +
                    std::to_string(wc.status) + ", vendor error " + std::to_string(wc.vendor_err) +
                    "); " + advice(wc.status, rails_[rail].port.roce()));
    }
    return 1;
  }
  if (kind == kRecvKind) {
    if (ep->state_ == IbvEndpoint::State::Failed) return 1;
    uint32_t slot = wc.wr_id & 0xffff;
    size_t qp = (wc.wr_id >> 16) & 0xff;
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      sink.on_put_arrived(ep->peer_, ntohl(wc.imm_data));
    } else if (qp == 0 && slot < kSlots && wc.byte_len <= kMaxMessage) {
      sink.on_message(ep->peer_, {ep->recv_.mem.data() + slot * kMaxMessage, wc.byte_len});
    } else {
      fail(*ep, "ibverbs: rank " + std::to_string(ep->peer_) + " sent a message of " +
                    std::to_string(wc.byte_len) + " bytes on QP " + std::to_string(wc.qp_num) +
                    " (not the message QP, or too long)");
      return 1;
    }
    if (ep->state_ != IbvEndpoint::State::Failed) post_recv(*ep, qp, slot);
  } else if (kind == kSendKind) {
    uint64_t seq = wc.wr_id & ((1ull << 40) - 1);
    while (!ep->inflight_.empty() && ep->inflight_.front().first <= seq) {
      if (ep->inflight_.front().second >= 0)
        ep->free_slots_.push_back(ep->inflight_.front().second);
      ep->inflight_.pop_front();
    }
  }
  return 1;
}

int IbvTransport::progress(transport::EventSink& sink) {
  int n = 0;
  poll_connections();
  while (!backlog_.empty()) {
    auto [rail, wc] = backlog_.front();
    backlog_.pop_front();
    n += handle(rail, wc, sink);
  }
  for (size_t r = 0; r < rails_.size(); ++r) {
    for (int round = 0; round < 8; ++round) {
      ibv_wc wc[32];
      int k = ibv_poll_cq(rails_[r].cq, 32, wc);
      if (k < 0) {
        for (auto& [p, ep] : eps_)
          fail(*ep, "ibverbs: polling the completion queue of " + where(r) +
                        " failed (overrun of " + std::to_string(rails_[r].cqe) + " entries?)");
        break;
      }
      for (int i = 0; i < k; ++i) n += handle(r, wc[i], sink);
      if (k < 32) break;
    }
  }
  n += report_failures(sink);
  return n;
}

bool IbvTransport::arm() {
  for (auto& [p, ep] : eps_)
    if (ep->state_ == IbvEndpoint::State::Init || ep->state_ == IbvEndpoint::State::Rts)
      return false;  // connection setup polls the store
  if (!failures_.empty() || !backlog_.empty()) return false;
  if (bell_fd_ >= 0) {  // a connection request rang: its inbox entry is read now
    char buf[16];
    bool rang = false;
    while (recv(bell_fd_, buf, sizeof(buf), MSG_DONTWAIT) > 0) rang = true;
    if (rang) {
      next_poll_ = {};
      return false;
    }
  }
  bool idle = true;
  for (size_t r = 0; r < rails_.size(); ++r) {
    ibv_cq* ev = nullptr;
    void* ev_ctx = nullptr;
    unsigned got = 0;
    while (lib_.get_cq_event(rails_[r].channel, &ev, &ev_ctx) == 0) ++got;
    if (got > 0) lib_.ack_cq_events(rails_[r].cq, got);
    ibv_req_notify_cq(rails_[r].cq, 0);
    ibv_wc wc[16];
    int k = ibv_poll_cq(rails_[r].cq, 16, wc);
    for (int i = 0; i < k; ++i) backlog_.push_back({r, wc[i]});
    if (k != 0) idle = false;
  }
  return idle;
}

std::unique_ptr<transport::MemoryRegion> IbvTransport::register_memory(void* addr, size_t length,
                                                                       tpcomm::Device device) {
  if (device.type != DeviceType::CPU)
    throw NotSupportedError("ibverbs transport: registering " + device.str() +
                            " memory is not supported yet (host memory only)");
  if (length == 0) return std::make_unique<IbvRegion>(RegCache::Ref(), addr, 0);
  return std::make_unique<IbvRegion>(cache_->acquire(addr, length), addr, length);
}

// ---- endpoint ----------------------------------------------------------------------------------

transport::PostStatus IbvEndpoint::send(std::span<const iovec> iov) {
  if (state_ == State::Failed) return transport::PostStatus::PeerFailed;
  size_t total = 0;
  for (const iovec& v : iov) total += v.iov_len;
  if (total > IbvTransport::kMaxMessage)
    throw InvalidArgument("ibverbs: a message of " + std::to_string(total) +
                          " bytes exceeds max_message " +
                          std::to_string(IbvTransport::kMaxMessage));
  if (state_ != State::Ready) return transport::PostStatus::NoResource;
  uint8_t small[256];  // inline data is copied by ibv_post_send: a stack copy suffices
  // The provider may report more inline room than requested; never more than `small` holds.
  bool inl = total <= std::min<size_t>(t_->max_inline(), sizeof(small));
  if ((!inl && free_slots_.empty()) || inflight_.size() + 1 >= 2 * IbvTransport::kSlots)
    return transport::PostStatus::NoResource;
  uint8_t* dst = small;
  int slot = -1;
  if (!inl) {
    slot = free_slots_.back();
    dst = send_.mem.data() + static_cast<size_t>(slot) * IbvTransport::kMaxMessage;
  }
  size_t off = 0;
  for (const iovec& v : iov) {
    if (v.iov_len) std::memcpy(dst + off, v.iov_base, v.iov_len);
    off += v.iov_len;
  }
  uint64_t seq = next_seq_++;
  bool signaled = unsignaled_ + 1 >= static_cast<int>(IbvTransport::kSlots / 2) ||
                  free_slots_.size() <= IbvTransport::kSlots / 2 ||
                  inflight_.size() + 2 >= 2 * IbvTransport::kSlots;
  ibv_sge s{reinterpret_cast<uint64_t>(dst), static_cast<uint32_t>(total), send_.mr->lkey};
  ibv_send_wr w{};
  w.wr_id = (uint64_t{1} << 62) | (static_cast<uint64_t>(id_ & 0xfffff) << 40) | seq;
  w.sg_list = &s;
  w.num_sge = total > 0 ? 1 : 0;
  w.opcode = IBV_WR_SEND;
  w.send_flags = (signaled ? IBV_SEND_SIGNALED : 0) | (inl ? IBV_SEND_INLINE : 0);
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(qps_[0], &w, &bad);
  if (rc != 0) {
    t_->fail(*this, "ibverbs: ibv_post_send (send) to rank " + std::to_string(peer_) + " on " +
                        t_->where(0) + " failed: " + std::strerror(rc));
    return transport::PostStatus::PeerFailed;
  }
  if (slot >= 0) free_slots_.pop_back();
  inflight_.push_back({seq, slot});
  unsignaled_ = signaled ? 0 : unsignaled_ + 1;
  return transport::PostStatus::Ok;
}

transport::PostStatus IbvEndpoint::put(const transport::MemoryRegion& src, size_t src_offset,
                                       const transport::RemoteKey& dst, size_t dst_offset,
                                       size_t length, uint32_t imm, uint64_t cookie) {
  if (src_offset > src.length() || length > src.length() - src_offset || dst_offset > dst.length ||
      length > dst.length - dst_offset)
    throw InvalidArgument("ibverbs: put of " + std::to_string(length) + " bytes outside its " +
                          "source (" + std::to_string(src.length()) + ") or destination (" +
                          std::to_string(dst.length) + ") region");
  auto* r = dynamic_cast<const IbvRegion*>(&src);
  if (r == nullptr || dst.blob_size < 4 || dst.blob_size % 4 != 0)
    throw InvalidArgument("ibverbs: put from a region or to a key of another transport");
  if (state_ == State::Failed) return transport::PostStatus::PeerFailed;
  if (state_ != State::Ready || puts_in_flight_ >= static_cast<int>(IbvTransport::kPutDepth))
    return transport::PostStatus::NoResource;
  // Rails in turn, then the QPs of the rail in turn: consecutive stripes of one transfer (the
  // protocol splits it by max_put) go over different NICs; each carries its own immediate.
  size_t rail = static_cast<size_t>(next_put_ % rails_);
  size_t qi = rail * qpr_ + static_cast<size_t>((next_put_ / rails_) % qpr_);
  if (dst.blob_size < 4 * (rail + 1))
    throw InvalidArgument("ibverbs: the remote key of rank " + std::to_string(peer_) + " has " +
                          std::to_string(dst.blob_size / 4) + " rail(s), the connection " +
                          std::to_string(rails_));
  uint32_t rkey = 0;
  std::memcpy(&rkey, dst.blob_data + 4 * rail, 4);
  uint64_t id = t_->add_put(cookie, this);
  ibv_sge s{reinterpret_cast<uint64_t>(static_cast<uint8_t*>(src.addr()) + src_offset),
            static_cast<uint32_t>(length), r->lkey(rail)};
  ibv_send_wr w{};
  w.wr_id = (uint64_t{2} << 62) | id;
  w.sg_list = &s;
  w.num_sge = length > 0 ? 1 : 0;
  w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  w.send_flags = IBV_SEND_SIGNALED;
  w.imm_data = htonl(imm);
  w.wr.rdma.remote_addr = dst.addr + dst_offset;
  w.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(qps_[qi], &w, &bad);
  if (rc != 0) {
    t_->drop_put(id);
    t_->fail(*this, "ibverbs: ibv_post_send (RDMA write) to rank " + std::to_string(peer_) +
                        " on " + t_->where(rail) + " failed: " + std::strerror(rc));
    return transport::PostStatus::PeerFailed;
  }
  next_put_++;
  puts_in_flight_++;
  return transport::PostStatus::Ok;
}

}  // namespace tpcomm::ibv
