// Connection setup of the ibverbs transport: endpoints and their QPs (rails x QPs per rail),
// the connection data exchanged through the private store, RTR/RTS, and the doorbell that
// wakes a sleeping peer when a connection request is posted for it. See ibv_transport.h.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <random>

#include "core/log.h"
#include "tpcomm/error.hpp"
#include "transports/ibverbs/ibv_internal.h"
#include "transports/ibverbs/ibv_transport.h"

namespace tpcomm::ibv {
namespace {

/// One side's connection data, as published under c/<from>/<to>.
struct ConnData {
  uint16_t rails = 0, qpr = 0;
  int32_t from = -1, to = -1;
  uint64_t job = 0;
  struct RailData {
    uint16_t lid = 0;
    uint8_t mtu = 0, ll = 0;
    ibv_gid gid{};
    std::vector<uint32_t> qpn, psn;
  };
  std::vector<RailData> rail;
};

bool parse_conn(std::span<const uint8_t> b, ConnData* d) {
  size_t off = 0;
  uint32_t magic = 0;
  uint16_t ver = 0;
  if (!get_le(b, off, &magic) || magic != kConnMagic || !get_le(b, off, &ver) || ver != kVersion ||
      !get_le(b, off, &d->rails) || !get_le(b, off, &d->qpr) || !get_le(b, off, &d->from) ||
      !get_le(b, off, &d->to) || !get_le(b, off, &d->job) || d->rails == 0 || d->rails > 16 ||
      d->qpr == 0 || d->qpr > 16)
    return false;
  for (uint16_t r = 0; r < d->rails; ++r) {
    ConnData::RailData rd;
    if (!get_le(b, off, &rd.lid) || !get_le(b, off, &rd.mtu) || !get_le(b, off, &rd.ll) ||
        off + 16 > b.size())
      return false;
    std::memcpy(rd.gid.raw, b.data() + off, 16);
    off += 16;
    for (uint16_t q = 0; q < d->qpr; ++q) {
      uint32_t qpn = 0, psn = 0;
      if (!get_le(b, off, &qpn) || !get_le(b, off, &psn) || qpn == 0 || qpn > 0xffffff ||
          psn > 0xffffff)
        return false;
      rd.qpn.push_back(qpn);
      rd.psn.push_back(psn);
    }
    d->rail.push_back(std::move(rd));
  }
  return off == b.size();
}

}  // namespace

void IbvTransport::open_doorbell() {
  // A rank asleep in the engine's wait sleeps on wait_fd(); without a doorbell it would see a
  // new peer's connection request only at its next safety-net wake-up. The doorbell is a UDP
  // port on every interface; its port and this host's IPv4 addresses go under bell/<rank> in
  // the private store. Best effort: without it (no socket, UDP filtered) requests are polled.
  bell_fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(a);
  if (bell_fd_ < 0 || bind(bell_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(bell_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    TPLOG(INFO, IBVERBS) << "rank " << ctx_.rank << ": no connection doorbell ("
                         << errno_text(errno) << "); new peers are seen by polling";
    if (bell_fd_ >= 0) close(bell_fd_);
    bell_fd_ = -1;
    return;
  }
  std::vector<uint8_t> v;
  put_le(v, a.sin_port);  // network order, as sendto wants it
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next)
      if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP))
        put_le(v, reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
    freeifaddrs(ifs);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = ~uint64_t{0};
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, bell_fd_, &ev);
  try {
    ctx_.store->set("bell/" + std::to_string(ctx_.rank), v);
  } catch (const Error& e) {
    TPLOG(INFO, IBVERBS) << "rank " << ctx_.rank << ": doorbell not published: " << e.what();
  }
}

void IbvTransport::ring_doorbell(int peer) {
  if (bell_fd_ < 0) return;
  std::string key = "bell/" + std::to_string(peer);
  std::vector<uint8_t> v;
  try {
    if (!ctx_.store->check({key})) return;
    v = ctx_.store->get(key);
  } catch (const Error&) {
    return;  // the peer polls instead
  }
  size_t off = 0;
  uint16_t port = 0;
  if (!get_le(std::span<const uint8_t>(v), off, &port)) return;
  char b = 1;
  // Every address of the peer's host: the ones it cannot be reached by fail or reach nobody
  // listening; a datagram to the wrong process only wakes it once for nothing.
  for (uint32_t ip = 0; get_le(std::span<const uint8_t>(v), off, &ip);) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = port;
    to.sin_addr.s_addr = ip;
    (void)sendto(bell_fd_, &b, 1, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to), sizeof(to));
  }
}

IbvEndpoint& IbvTransport::make_endpoint(int peer, size_t rails,
                                         std::chrono::steady_clock::time_point deadline) {
  auto ep = std::make_unique<IbvEndpoint>(this, peer, next_ep_id_++);
  ep->deadline_ = deadline;
  ep->rails_ = rails;
  ep->qpr_ = static_cast<size_t>(o_.qps_per_connection);
  auto reg = [&](Block& b, size_t bytes) {
    b.mem.assign(bytes, 0);
    b.mr = lib_.reg_mr(rails_[0].pd, b.mem.data(), b.mem.size(), IBV_ACCESS_LOCAL_WRITE);
    if (b.mr == nullptr)
      throw TransportError("ibverbs: registering " + std::to_string(bytes) +
                           " bytes of bounce buffers on " + where(0) +
                           " failed: " + errno_text(errno) + " (raise 'ulimit -l')");
  };
  std::random_device rd;
  IbvEndpoint* e = ep.get();
  try {
    reg(e->recv_, kMaxMessage * kSlots);
    reg(e->send_, kMaxMessage * kSlots);
    for (uint32_t i = 0; i < kSlots; ++i) e->free_slots_.push_back(static_cast<int>(i));
    for (size_t i = 0; i < rails * e->qpr_; ++i) {
      Rail& r = rails_[i / e->qpr_];
      ibv_qp_init_attr ia{};
      ia.send_cq = ia.recv_cq = r.cq;
      ia.qp_type = IBV_QPT_RC;
      ia.cap.max_send_wr = 2 * kSlots + kPutDepth;
      ia.cap.max_recv_wr = kSlots;
      ia.cap.max_send_sge = 1;
      ia.cap.max_recv_sge = 1;
      ia.cap.max_inline_data = 64;
      ibv_qp* q = lib_.create_qp(r.pd, &ia);
      if (q == nullptr)
        throw TransportError("ibverbs: ibv_create_qp on " + r.where() + " for rank " +
                             std::to_string(peer) + " failed: " + errno_text(errno));
      if (i == 0) max_inline_ = ia.cap.max_inline_data;
      e->qps_.push_back(q);
      e->psn_.push_back(rd() & 0xffffff);
      r.by_qpn[q->qp_num] = {e, i};
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_INIT;
      a.port_num = static_cast<uint8_t>(r.port.port);
      a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
      int rc = lib_.modify_qp(q, &a,
                              IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
      if (rc != 0)
        throw TransportError("ibverbs: QP to INIT on " + r.where() + " failed: " + errno_text(rc));
      for (uint32_t s = 0; s < kSlots; ++s) post_recv(*e, i, s);
    }
  } catch (...) {
    destroy_endpoint(*e);
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
  if (rc != 0)
    fail(ep, "ibverbs: ibv_post_recv on " + where(qp / ep.qpr_) + " failed: " + errno_text(rc));
}

void IbvTransport::publish(IbvEndpoint& ep) {
  std::vector<uint8_t> b;
  put_le(b, kConnMagic);
  put_le(b, kVersion);
  put_le(b, static_cast<uint16_t>(ep.rails_));
  put_le(b, static_cast<uint16_t>(ep.qpr_));
  put_le(b, static_cast<int32_t>(ctx_.rank));
  put_le(b, static_cast<int32_t>(ep.peer_));
  put_le(b, job_hash_);
  for (size_t r = 0; r < ep.rails_; ++r) {
    const Rail& rail = rails_[r];
    put_le(b, rail.port.attr.lid);
    put_le(b, static_cast<uint8_t>(rail.port.attr.active_mtu));
    put_le(b, static_cast<uint8_t>(rail.port.attr.link_layer));
    b.insert(b.end(), rail.gid.raw, rail.gid.raw + 16);
    for (size_t q = 0; q < ep.qpr_; ++q) {
      put_le(b, ep.qps_[r * ep.qpr_ + q]->qp_num);
      put_le(b, ep.psn_[r * ep.qpr_ + q]);
    }
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
  uint16_t lid = 0, nrails = 0;
  uint64_t job = 0;
  if (addr.size() != kAddrSize || !get_le(addr, off, &magic) || magic != kAddrMagic ||
      !get_le(addr, off, &ver) || ver != kVersion || !get_le(addr, off, &ll) ||
      !get_le(addr, off, &mtu) || !get_le(addr, off, &rank) || !get_le(addr, off, &lid) ||
      !get_le(addr, off, &nrails) || !get_le(addr, off, &job) || nrails == 0)
    throw TransportError("ibverbs: the address of rank " + std::to_string(peer) +
                         " is not an ibverbs address of this version");
  if (rank != peer || job != job_hash_)
    throw TransportError("ibverbs: the address published for rank " + std::to_string(peer) +
                         " belongs to rank " + std::to_string(rank) +
                         (job != job_hash_ ? " of another job" : ""));
  if (ll != rails_[0].port.attr.link_layer)
    throw TransportError("ibverbs: rank " + std::to_string(peer) + " is on " +
                         (ll == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand") + ", " + where(0) +
                         " is not: no RDMA path between them");
  size_t rails = std::min<size_t>(nrails, rails_.size());
  IbvEndpoint& ep = make_endpoint(peer, rails, deadline);
  publish(ep);
  std::vector<uint8_t> me;
  put_le(me, static_cast<int32_t>(ctx_.rank));
  ctx_.store->append("inbox/" + std::to_string(peer), me);
  ring_doorbell(peer);
  next_poll_ = {};
  return ep;
}

bool IbvTransport::try_rtr_rts(IbvEndpoint& ep) {
  std::string key = "c/" + std::to_string(ep.peer_) + "/" + std::to_string(ctx_.rank);
  if (!ctx_.store->check({key})) return false;
  std::vector<uint8_t> raw = ctx_.store->get(key);
  ConnData d;
  std::string who = "rank " + std::to_string(ep.peer_);
  bool ok = parse_conn(raw, &d) && d.from == ep.peer_ && d.to == ctx_.rank && d.job == job_hash_ &&
            d.rails == ep.rails_ && d.qpr == ep.qpr_;
  for (size_t r = 0; ok && r < d.rail.size(); ++r)
    ok = mtu_bytes(d.rail[r].mtu) != 0 && d.rail[r].ll == rails_[r].port.attr.link_layer;
  if (!ok) {
    fail(ep, "ibverbs: the connection data of " + who +
                 " is malformed or mismatched (ranks, job, link layer, rails or "
                 "TPCOMM_IB_QPS_PER_CONNECTION differ)");
    return true;
  }
  int path_mtu = 0;
  for (size_t i = 0; i < ep.qps_.size(); ++i) {
    size_t r = i / ep.qpr_, q = i % ep.qpr_;
    const Rail& rail = rails_[r];
    const ConnData::RailData& pd = d.rail[r];
    ibv_mtu path = static_cast<ibv_mtu>(std::min<int>(pd.mtu, rail.port.attr.active_mtu));
    path_mtu = mtu_bytes(path);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = path;
    a.dest_qp_num = pd.qpn[q];
    a.rq_psn = pd.psn[q];
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = static_cast<uint8_t>(rail.port.port);
    a.ah_attr.dlid = pd.lid;
    a.ah_attr.sl = static_cast<uint8_t>(o_.service_level);
    if (rail.port.roce() || pd.lid == 0) {
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = pd.gid;
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(rail.gid_index);
      a.ah_attr.grh.hop_limit = 64;
      a.ah_attr.grh.traffic_class = static_cast<uint8_t>(o_.traffic_class);
    }
    int rc = lib_.modify_qp(ep.qps_[i], &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc != 0) {
      fail(ep, "ibverbs: QP to RTR towards " + who + " on " + rail.where() +
                   " failed: " + errno_text(rc) +
                   (rail.port.roce() ? " (RoCE: check TPCOMM_IB_GID_INDEX and MTU)" : ""));
      return true;
    }
    ibv_qp_attr s{};
    s.qp_state = IBV_QPS_RTS;
    s.sq_psn = ep.psn_[i];
    s.timeout = static_cast<uint8_t>(o_.timeout);
    s.retry_cnt = static_cast<uint8_t>(o_.retry_cnt);
    s.rnr_retry = 7;
    s.max_rd_atomic = 1;
    rc = lib_.modify_qp(ep.qps_[i], &s,
                        IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                            IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc != 0) {
      fail(ep, "ibverbs: QP to RTS towards " + who + " on " + rail.where() +
                   " failed: " + errno_text(rc));
      return true;
    }
  }
  ep.state_ = IbvEndpoint::State::Rts;
  ctx_.store->set("up/" + std::to_string(ctx_.rank) + "/" + std::to_string(ep.peer_), {1});
  TPLOG(INFO, IBVERBS) << "rank " << ctx_.rank << " -> " << who << ": " << ep.qps_.size()
                       << " RC QP(s) on " << ep.rails_ << " rail(s) of " << where() << ", MTU "
                       << path_mtu;
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
        // The requester published its data before announcing itself: its rail count (the
        // smaller of both ranks') decides ours for this connection.
        ConnData d;
        std::vector<uint8_t> raw =
            ctx_.store->get("c/" + std::to_string(r) + "/" + std::to_string(ctx_.rank));
        size_t rails = parse_conn(raw, &d) ? std::min<size_t>(d.rails, rails_.size()) : 1;
        IbvEndpoint& ep = make_endpoint(r, rails, now + ctx_.timeout);
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

}  // namespace tpcomm::ibv
