// The ibverbs transport: see ibv_transport.h and docs/ibverbs.md.
#include "transports/ibverbs/ibv_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "core/log.h"
#include "tpcomm/error.hpp"
#include "transports/ibverbs/probe.h"

namespace tpcomm::ibv {
namespace {

constexpr uint32_t kAddrMagic = 0x54504942;  // "TPIB"
constexpr uint32_t kConnMagic = 0x54504943;  // "TPIC"
constexpr uint16_t kVersion = 1;
constexpr size_t kAddrSize = 40;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

template <class T>
void put_le(std::vector<uint8_t>& b, T v) {
  uint8_t tmp[sizeof(T)];
  std::memcpy(tmp, &v, sizeof(T));
  b.insert(b.end(), tmp, tmp + sizeof(T));
}

template <class T>
bool get_le(std::span<const uint8_t> b, size_t& off, T* v) {
  if (off + sizeof(T) > b.size()) return false;
  std::memcpy(v, b.data() + off, sizeof(T));
  off += sizeof(T);
  return true;
}

std::string errno_text(int e) {
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

// wr_id: kind in the top 2 bits.
constexpr uint64_t kSendKind = 1, kPutKind = 2, kRecvKind = 3;
uint64_t kind_of(uint64_t id) { return id >> 62; }

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

/// A registered user region; the key's blob is the rkey.
class IbvRegion : public transport::MemoryRegion {
 public:
  IbvRegion(const VerbsLib& lib, ibv_mr* mr, void* addr, size_t len)
      : MemoryRegion(addr, len, Device::cpu()), lib_(lib), mr_(mr) {}
  ~IbvRegion() override {
    if (mr_ != nullptr) lib_.dereg_mr(mr_);
  }
  transport::RemoteKey remote_key() const override {
    transport::RemoteKey k;
    k.addr = reinterpret_cast<uint64_t>(addr());
    k.length = length();
    uint32_t rkey = mr_ != nullptr ? mr_->rkey : 0;
    uint8_t b[4];
    std::memcpy(b, &rkey, 4);
    k.set_blob({b, 4});
    return k;
  }
  uint32_t lkey() const { return mr_ != nullptr ? mr_->lkey : 0; }

 private:
  const VerbsLib& lib_;
  ibv_mr* mr_;
};

}  // namespace

// ---- transport ---------------------------------------------------------------------------------

IbvTransport::IbvTransport(const transport::TransportContext& ctx, const Options& o)
    : ctx_(ctx), o_(o), lib_(load_verbs(o.library)) {
  std::vector<PortInfo> ports = usable_ports(lib_, o_);
  port_ = ports.front();
  int n = 0;
  ibv_device** list = lib_.get_device_list(&n);
  for (int i = 0; i < n && ctx_v_ == nullptr; ++i)
    if (port_.device == lib_.get_device_name(list[i])) ctx_v_ = lib_.open_device(list[i]);
  lib_.free_device_list(list);
  if (ctx_v_ == nullptr)
    throw NotSupportedError("ibverbs transport: cannot open " + where() + ": " + errno_text(errno));
  auto cleanup = [&](const std::string& what) {
    int e = errno;
    if (cq_) lib_.destroy_cq(cq_);
    if (channel_) lib_.destroy_comp_channel(channel_);
    if (pd_) lib_.dealloc_pd(pd_);
    lib_.close_device(ctx_v_);
    throw NotSupportedError("ibverbs transport: " + what + " on " + where() +
                            " failed: " + errno_text(e));
  };
  pd_ = lib_.alloc_pd(ctx_v_);
  if (pd_ == nullptr) cleanup("ibv_alloc_pd");
  channel_ = lib_.create_comp_channel(ctx_v_);
  if (channel_ == nullptr) cleanup("ibv_create_comp_channel");
  fcntl(channel_->fd, F_SETFL, fcntl(channel_->fd, F_GETFL) | O_NONBLOCK);
  ibv_device_attr da{};
  lib_.query_device(ctx_v_, &da);
  cqe_ = std::min(da.max_cqe > 0 ? da.max_cqe : 4096, 65536);
  cq_ = lib_.create_cq(ctx_v_, cqe_, this, channel_, 0);
  if (cq_ == nullptr) cleanup("ibv_create_cq");
  // GID: TPCOMM_IB_GID_INDEX, else RoCE v2 IPv4-mapped, RoCE v2, RoCE v1 / IB, first non-zero.
  if (port_.roce()) {
    int best = -1, best_rank = 99;
    for (int i = 0; i < port_.attr.gid_tbl_len; ++i) {
      ibv_gid g{};
      if (lib_.query_gid(ctx_v_, static_cast<uint8_t>(port_.port), i, &g) != 0) continue;
      static const uint8_t zero[16] = {};
      if (std::memcmp(g.raw, zero, 16) == 0) continue;
      uint32_t type = IBV_GID_TYPE_ROCE_V1;
      if (lib_.query_gid_ex != nullptr) {
        ibv_gid_entry e{};
        if (lib_.query_gid_ex(ctx_v_, port_.port, i, &e, 0, sizeof(e)) == 0) type = e.gid_type;
      }
      bool v4 = std::all_of(g.raw, g.raw + 10, [](uint8_t b) { return b == 0; }) &&
                g.raw[10] == 0xff && g.raw[11] == 0xff;
      int rank = type == IBV_GID_TYPE_ROCE_V2 ? (v4 ? 0 : 1) : 2;
      if (i == o_.gid_index) rank = -1;
      if (rank < best_rank) best = i, best_rank = rank;
    }
    if (o_.gid_index >= 0 && best != o_.gid_index)
      cleanup("TPCOMM_IB_GID_INDEX=" + std::to_string(o_.gid_index) + " (no such GID; table has " +
              std::to_string(port_.attr.gid_tbl_len) + " entries)");
    if (best < 0) cleanup("finding a RoCE GID");
    gid_index_ = best;
  } else {
    gid_index_ = std::max(0, o_.gid_index);
  }
  lib_.query_gid(ctx_v_, static_cast<uint8_t>(port_.port), gid_index_, &gid_);
  job_hash_ = fnv1a(ctx.job_id);
  put_le(address_, kAddrMagic);
  put_le(address_, kVersion);
  put_le(address_, static_cast<uint8_t>(port_.attr.link_layer));
  put_le(address_, static_cast<uint8_t>(port_.attr.active_mtu));
  put_le(address_, static_cast<int32_t>(ctx.rank));
  put_le(address_, port_.attr.lid);
  put_le(address_, static_cast<uint16_t>(0));
  put_le(address_, job_hash_);
  address_.insert(address_.end(), gid_.raw, gid_.raw + 16);
  TPLOG(INFO, IBVERBS) << "rank " << ctx.rank << ": ibverbs on " << where() << " ("
                       << (port_.roce() ? "RoCE" : "InfiniBand") << ", MTU "
                       << mtu_bytes(port_.attr.active_mtu) << ", GID index " << gid_index_ << ", "
                       << port_gbps(port_.attr) << " Gb/s)";
}

IbvTransport::~IbvTransport() {
  for (auto& [peer, ep] : eps_) {
    for (ibv_qp* q : ep->qps_) lib_.destroy_qp(q);
    if (ep->recv_.mr) lib_.dereg_mr(ep->recv_.mr);
    if (ep->send_.mr) lib_.dereg_mr(ep->send_.mr);
  }
  eps_.clear();
  lib_.destroy_cq(cq_);
  lib_.destroy_comp_channel(channel_);
  lib_.dealloc_pd(pd_);
  lib_.close_device(ctx_v_);
}

std::string IbvTransport::where() const { return port_.device + ":" + std::to_string(port_.port); }

transport::Capabilities IbvTransport::capabilities() const {
  transport::Capabilities c;
  c.reach = transport::Reach::Network;
  c.native_put = true;
  c.max_message = kMaxMessage;
  c.max_put = port_.attr.max_msg_sz > 0 ? port_.attr.max_msg_sz : (1u << 30);
  c.recv_slots = kSlots;
  c.rndv_threshold = 32768;
  c.latency_us = 2.0;
  c.bandwidth_gbps = std::max(1.0, port_gbps(port_.attr) / 8.0);
  return c;
}

int IbvTransport::wait_fd() const { return channel_->fd; }

IbvEndpoint& IbvTransport::make_endpoint(int peer, std::chrono::steady_clock::time_point deadline) {
  auto ep = std::make_unique<IbvEndpoint>(this, peer, next_ep_id_++);
  ep->deadline_ = deadline;
  auto reg = [&](Block& b, size_t bytes) {
    b.mem.assign(bytes, 0);
    b.mr = lib_.reg_mr(pd_, b.mem.data(), b.mem.size(), IBV_ACCESS_LOCAL_WRITE);
    if (b.mr == nullptr)
      throw TransportError("ibverbs: registering " + std::to_string(bytes) +
                           " bytes of bounce buffers on " + where() +
                           " failed: " + errno_text(errno) + " (raise 'ulimit -l')");
  };
  std::random_device rd;
  IbvEndpoint* e = ep.get();
  auto undo = [&]() {
    for (ibv_qp* q : e->qps_) by_qpn_.erase(q->qp_num), lib_.destroy_qp(q);
    if (e->recv_.mr) lib_.dereg_mr(e->recv_.mr);
    if (e->send_.mr) lib_.dereg_mr(e->send_.mr);
  };
  try {
    reg(e->recv_, kMaxMessage * kSlots);
    reg(e->send_, kMaxMessage * kSlots);
    for (uint32_t i = 0; i < kSlots; ++i) e->free_slots_.push_back(static_cast<int>(i));
    for (int i = 0; i < o_.qps_per_connection; ++i) {
      ibv_qp_init_attr ia{};
      ia.send_cq = ia.recv_cq = cq_;
      ia.qp_type = IBV_QPT_RC;
      ia.cap.max_send_wr = 2 * kSlots + kPutDepth;
      ia.cap.max_recv_wr = kSlots;
      ia.cap.max_send_sge = 1;
      ia.cap.max_recv_sge = 1;
      ia.cap.max_inline_data = 64;
      ibv_qp* q = lib_.create_qp(pd_, &ia);
      if (q == nullptr)
        throw TransportError("ibverbs: ibv_create_qp on " + where() + " for rank " +
                             std::to_string(peer) + " failed: " + errno_text(errno));
      max_inline_ = ia.cap.max_inline_data;
      e->qps_.push_back(q);
      e->psn_.push_back(rd() & 0xffffff);
      by_qpn_[q->qp_num] = {e, e->qps_.size() - 1};
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_INIT;
      a.port_num = static_cast<uint8_t>(port_.port);
      a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
      int rc = lib_.modify_qp(q, &a,
                              IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
      if (rc != 0)
        throw TransportError("ibverbs: QP to INIT on " + where() + " failed: " + errno_text(rc));
      for (uint32_t s = 0; s < kSlots; ++s) post_recv(*e, e->qps_.size() - 1, s);
    }
  } catch (...) {
    undo();
    throw;
  }
  return *(eps_[peer] = std::move(ep));
}

void IbvTransport::post_recv(IbvEndpoint& ep, size_t qp, uint32_t slot) {
  ibv_sge s{};
  ibv_recv_wr w{};
  w.wr_id = (kRecvKind << 62) | (static_cast<uint64_t>(qp) << 16) | slot;
  if (qp == 0) {  // messages land on QP 0; the others only take put notifications
    s.addr = reinterpret_cast<uint64_t>(ep.recv_.mem.data() + slot * kMaxMessage);
    s.length = kMaxMessage;
    s.lkey = ep.recv_.mr->lkey;
    w.sg_list = &s;
    w.num_sge = 1;
  }
  ibv_recv_wr* bad = nullptr;
  int rc = ibv_post_recv(ep.qps_[qp], &w, &bad);
  if (rc != 0) fail(ep, "ibv_post_recv on " + where() + " failed: " + errno_text(rc));
}

void IbvTransport::publish(IbvEndpoint& ep) {
  std::vector<uint8_t> b;
  put_le(b, kConnMagic);
  put_le(b, kVersion);
  put_le(b, static_cast<uint16_t>(ep.qps_.size()));
  put_le(b, static_cast<int32_t>(ctx_.rank));
  put_le(b, static_cast<int32_t>(ep.peer_));
  put_le(b, job_hash_);
  put_le(b, port_.attr.lid);
  put_le(b, static_cast<uint8_t>(port_.attr.active_mtu));
  put_le(b, static_cast<uint8_t>(port_.attr.link_layer));
  b.insert(b.end(), gid_.raw, gid_.raw + 16);
  for (size_t i = 0; i < ep.qps_.size(); ++i) {
    put_le(b, ep.qps_[i]->qp_num);
    put_le(b, ep.psn_[i]);
  }
  ctx_.store->set("c/" + std::to_string(ctx_.rank) + "/" + std::to_string(ep.peer_), b);
}

transport::Endpoint& IbvTransport::connect(int peer, std::span<const uint8_t> addr,
                                           std::chrono::steady_clock::time_point deadline) {
  auto it = eps_.find(peer);
  if (it != eps_.end()) return *it->second;
  size_t off = 0;
  uint32_t magic = 0;
  uint16_t ver = 0;
  uint8_t ll = 0, mtu = 0;
  int32_t rank = -1;
  uint16_t lid = 0, pad = 0;
  uint64_t job = 0;
  if (addr.size() != kAddrSize || !get_le(addr, off, &magic) || magic != kAddrMagic ||
      !get_le(addr, off, &ver) || ver != kVersion || !get_le(addr, off, &ll) ||
      !get_le(addr, off, &mtu) || !get_le(addr, off, &rank) || !get_le(addr, off, &lid) ||
      !get_le(addr, off, &pad) || !get_le(addr, off, &job))
    throw TransportError("ibverbs: the address of rank " + std::to_string(peer) +
                         " is not an ibverbs address of this version");
  if (rank != peer || job != job_hash_)
    throw TransportError("ibverbs: the address published for rank " + std::to_string(peer) +
                         " belongs to rank " + std::to_string(rank) +
                         (job != job_hash_ ? " of another job" : ""));
  if (ll != port_.attr.link_layer)
    throw TransportError("ibverbs: rank " + std::to_string(peer) + " is on " +
                         (ll == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand") + ", " + where() +
                         " is not: no RDMA path between them");
  IbvEndpoint& ep = make_endpoint(peer, deadline);
  publish(ep);
  std::vector<uint8_t> me;
  put_le(me, static_cast<int32_t>(ctx_.rank));
  ctx_.store->append("inbox/" + std::to_string(peer), me);
  next_poll_ = {};
  return ep;
}

bool IbvTransport::try_rtr_rts(IbvEndpoint& ep) {
  std::string key = "c/" + std::to_string(ep.peer_) + "/" + std::to_string(ctx_.rank);
  if (!ctx_.store->check({key})) return false;
  std::vector<uint8_t> raw = ctx_.store->get(key);
  std::span<const uint8_t> b(raw);
  size_t off = 0;
  uint32_t magic = 0;
  uint16_t ver = 0, n = 0, lid = 0;
  int32_t from = -1, to = -1;
  uint64_t job = 0;
  uint8_t mtu = 0, ll = 0;
  ibv_gid gid{};
  bool ok = get_le(b, off, &magic) && magic == kConnMagic && get_le(b, off, &ver) &&
            ver == kVersion && get_le(b, off, &n) && get_le(b, off, &from) && get_le(b, off, &to) &&
            get_le(b, off, &job) && get_le(b, off, &lid) && get_le(b, off, &mtu) &&
            get_le(b, off, &ll) && off + 16 <= b.size();
  if (ok) std::memcpy(gid.raw, b.data() + off, 16), off += 16;
  std::string who = "rank " + std::to_string(ep.peer_);
  if (!ok || from != ep.peer_ || to != ctx_.rank || job != job_hash_ || n != ep.qps_.size() ||
      mtu_bytes(mtu) == 0 || ll != port_.attr.link_layer) {
    fail(ep, "ibverbs: the connection data of " + who +
                 " is malformed or mismatched (ranks, job, link layer or "
                 "TPCOMM_IB_QPS_PER_CONNECTION differ)");
    return true;
  }
  ibv_mtu path = static_cast<ibv_mtu>(std::min<int>(mtu, port_.attr.active_mtu));
  for (size_t i = 0; i < ep.qps_.size(); ++i) {
    uint32_t qpn = 0, psn = 0;
    if (!get_le(b, off, &qpn) || !get_le(b, off, &psn) || qpn == 0 || qpn > 0xffffff ||
        psn > 0xffffff) {
      fail(ep, "ibverbs: the connection data of " + who + " has a bad QP number or PSN");
      return true;
    }
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = path;
    a.dest_qp_num = qpn;
    a.rq_psn = psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = static_cast<uint8_t>(port_.port);
    a.ah_attr.dlid = lid;
    if (port_.roce() || lid == 0) {
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = gid;
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index_);
      a.ah_attr.grh.hop_limit = 64;
    }
    int rc = lib_.modify_qp(ep.qps_[i], &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc != 0) {
      fail(ep, "ibverbs: QP to RTR towards " + who + " on " + where() +
                   " failed: " + errno_text(rc) +
                   (port_.roce() ? " (RoCE: check TPCOMM_IB_GID_INDEX and MTU)" : ""));
      return true;
    }
    ibv_qp_attr r{};
    r.qp_state = IBV_QPS_RTS;
    r.sq_psn = ep.psn_[i];
    r.timeout = static_cast<uint8_t>(o_.timeout);
    r.retry_cnt = static_cast<uint8_t>(o_.retry_cnt);
    r.rnr_retry = 7;
    r.max_rd_atomic = 1;
    rc = lib_.modify_qp(ep.qps_[i], &r,
                        IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                            IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc != 0) {
      fail(ep,
           "ibverbs: QP to RTS towards " + who + " on " + where() + " failed: " + errno_text(rc));
      return true;
    }
  }
  ep.state_ = IbvEndpoint::State::Rts;
  ctx_.store->set("up/" + std::to_string(ctx_.rank) + "/" + std::to_string(ep.peer_), {1});
  TPLOG(INFO, IBVERBS) << "rank " << ctx_.rank << " -> " << who << ": " << ep.qps_.size()
                       << " RC QP(s) on " << where() << ", MTU " << mtu_bytes(path);
  return true;
}

void IbvTransport::poll_connections() {
  auto now = std::chrono::steady_clock::now();
  bool pending = false;
  for (auto& [p, ep] : eps_)
    if (ep->state_ == IbvEndpoint::State::Init || ep->state_ == IbvEndpoint::State::Rts)
      pending = true;
  if (now < next_poll_) return;
  next_poll_ = now + (pending ? std::chrono::milliseconds(1) : std::chrono::milliseconds(20));
  try {
    std::string inbox = "inbox/" + std::to_string(ctx_.rank);
    if (ctx_.store->check({inbox})) {
      std::vector<uint8_t> v = ctx_.store->get(inbox);
      for (; inbox_seen_ + 4 <= v.size(); inbox_seen_ += 4) {
        int32_t r = -1;
        std::memcpy(&r, v.data() + inbox_seen_, 4);
        if (r < 0 || r >= ctx_.world_size || r == ctx_.rank || eps_.count(r)) continue;
        IbvEndpoint& ep = make_endpoint(r, now + ctx_.timeout);
        publish(ep);
      }
    }
    for (auto& [p, ep] : eps_) {
      if (ep->state_ == IbvEndpoint::State::Init) try_rtr_rts(*ep);
      if (ep->state_ == IbvEndpoint::State::Rts &&
          ctx_.store->check({"up/" + std::to_string(p) + "/" + std::to_string(ctx_.rank)}))
        ep->state_ = IbvEndpoint::State::Ready;
      if ((ep->state_ == IbvEndpoint::State::Init || ep->state_ == IbvEndpoint::State::Rts) &&
          now > ep->deadline_)
        fail(*ep, "ibverbs: no connection with rank " + std::to_string(p) + " via " + where() +
                      " before the deadline (the peer never connected back)");
    }
  } catch (const Error& e) {
    TPLOG(WARN, IBVERBS) << "rank " << ctx_.rank << ": connection setup: " << e.what();
  }
}

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

int IbvTransport::handle(const ibv_wc& wc, transport::EventSink& sink) {
  uint64_t kind = kind_of(wc.wr_id);
  auto qit = by_qpn_.find(wc.qp_num);
  IbvEndpoint* ep = qit == by_qpn_.end() ? nullptr : qit->second.first;
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
      fail(*ep, "ibverbs: rank " + std::to_string(ep->peer_) + " via " + where() + " (QP " +
                    std::to_string(wc.qp_num) + "): " + op +
                    " failed: " + lib_.wc_status_str(wc.status) + " (status " +
                    std::to_string(wc.status) + ", vendor error " + std::to_string(wc.vendor_err) +
                    "); " + advice(wc.status, port_.roce()));
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
    ibv_wc wc = backlog_.front();
    backlog_.pop_front();
    n += handle(wc, sink);
  }
  for (int round = 0; round < 8; ++round) {
    ibv_wc wc[32];
    int k = ibv_poll_cq(cq_, 32, wc);
    if (k < 0) {
      for (auto& [p, ep] : eps_)
        fail(*ep, "ibverbs: polling the completion queue of " + where() + " failed (overrun of " +
                      std::to_string(cqe_) + " entries?)");
      break;
    }
    for (int i = 0; i < k; ++i) n += handle(wc[i], sink);
    if (k < 32) break;
  }
  n += report_failures(sink);
  return n;
}

bool IbvTransport::arm() {
  for (auto& [p, ep] : eps_)
    if (ep->state_ == IbvEndpoint::State::Init || ep->state_ == IbvEndpoint::State::Rts)
      return false;  // connection setup polls the store
  if (!failures_.empty() || !backlog_.empty()) return false;
  ibv_cq* ev = nullptr;
  void* ev_ctx = nullptr;
  unsigned got = 0;
  while (lib_.get_cq_event(channel_, &ev, &ev_ctx) == 0) ++got;
  if (got > 0) lib_.ack_cq_events(cq_, got);
  ibv_req_notify_cq(cq_, 0);
  ibv_wc wc[16];
  int k = ibv_poll_cq(cq_, 16, wc);
  for (int i = 0; i < k; ++i) backlog_.push_back(wc[i]);
  return k == 0;
}

std::unique_ptr<transport::MemoryRegion> IbvTransport::register_memory(void* addr, size_t length,
                                                                       tpcomm::Device device) {
  if (device.type != DeviceType::CPU)
    throw NotSupportedError("ibverbs transport: registering " + device.str() +
                            " memory is not supported yet (host memory only)");
  if (length == 0) return std::make_unique<IbvRegion>(lib_, nullptr, addr, 0);
  ibv_mr* mr = lib_.reg_mr(
      pd_, addr, length, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (mr == nullptr)
    throw TransportError("ibverbs: ibv_reg_mr of " + std::to_string(length) + " bytes on " +
                         where() + " failed: " + errno_text(errno) +
                         " (raise the locked-memory limit, 'ulimit -l unlimited')");
  return std::make_unique<IbvRegion>(lib_, mr, addr, length);
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
                        t_->where() + " failed: " + std::strerror(rc));
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
  if (r == nullptr || dst.blob_size != 4)
    throw InvalidArgument("ibverbs: put from a region or to a key of another transport");
  if (state_ == State::Failed) return transport::PostStatus::PeerFailed;
  if (state_ != State::Ready || puts_in_flight_ >= static_cast<int>(IbvTransport::kPutDepth))
    return transport::PostStatus::NoResource;
  uint32_t rkey = 0;
  std::memcpy(&rkey, dst.blob_data, 4);
  uint64_t id = t_->add_put(cookie, this);
  ibv_sge s{reinterpret_cast<uint64_t>(static_cast<uint8_t*>(src.addr()) + src_offset),
            static_cast<uint32_t>(length), r->lkey()};
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
  ibv_qp* qp = qps_[next_put_qp_++ % qps_.size()];
  int rc = ibv_post_send(qp, &w, &bad);
  if (rc != 0) {
    t_->drop_put(id);
    t_->fail(*this, "ibverbs: ibv_post_send (RDMA write) to rank " + std::to_string(peer_) +
                        " on " + t_->where() + " failed: " + std::strerror(rc));
    return transport::PostStatus::PeerFailed;
  }
  puts_in_flight_++;
  return transport::PostStatus::Ok;
}

}  // namespace tpcomm::ibv
