// The loopback verbs test device: see fake_verbs.h for the model and its limits. This file has the
// exported entry points (libibverbs' ibv_* and the tpfake_* test hooks); the simulated HCA is in
// fake_hca.cc and the structures both share in fake_verbs_internal.h.
#include "fake_verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "fake_verbs_internal.h"

using tpfake_internal::Chan, tpfake_internal::Cq, tpfake_internal::Ctx, tpfake_internal::Mr,
    tpfake_internal::Pd, tpfake_internal::Qp, tpfake_internal::Seg;
using tpfake_internal::cq_of, tpfake_internal::ctx_of, tpfake_internal::dev_index,
    tpfake_internal::init_devs, tpfake_internal::qp_of, tpfake_internal::ring_bell,
    tpfake_internal::set_error, tpfake_internal::start_hca;
using tpfake_internal::g_ctx_counter, tpfake_internal::g_ctxs, tpfake_internal::g_devs,
    tpfake_internal::g_fork_init, tpfake_internal::g_mu, tpfake_internal::g_ndevs,
    tpfake_internal::g_port_state, tpfake_internal::g_qp_counter, tpfake_internal::g_stats;
using tpfake_internal::kGids, tpfake_internal::kMagic, tpfake_internal::kMaxCqe,
    tpfake_internal::kMaxDevs, tpfake_internal::kMaxInline, tpfake_internal::kMaxMsg,
    tpfake_internal::kMaxSge, tpfake_internal::kMaxWr;
using tpfake_internal::op_poll_cq, tpfake_internal::op_post_recv, tpfake_internal::op_post_send,
    tpfake_internal::op_req_notify_cq;

namespace {

void make_gids(Ctx* c, uint32_t id) {
  uint32_t pid = static_cast<uint32_t>(getpid());
  std::memset(c->gid, 0, sizeof(c->gid));
  c->gid[0][0] = 0xfe, c->gid[0][1] = 0x80;  // RoCE v1, link-local
  std::memcpy(&c->gid[0][8], &pid, 4);
  std::memcpy(&c->gid[0][12], &id, 4);
  c->gid[1][10] = 0xff, c->gid[1][11] = 0xff;  // RoCE v2, IPv4-mapped 10.x.y.z
  uint32_t v4 = (pid * 16 + id) & 0xffffff;
  c->gid[1][12] = 10, c->gid[1][13] = uint8_t(v4 >> 16), c->gid[1][14] = uint8_t(v4 >> 8),
  c->gid[1][15] = uint8_t(v4);
  c->gid[2][0] = 0xfd;  // RoCE v2, IPv6 ULA
  std::memcpy(&c->gid[2][8], &pid, 4);
  std::memcpy(&c->gid[2][12], &id, 4);
  c->gid_type[0] = IBV_GID_TYPE_ROCE_V1;
  c->gid_type[1] = c->gid_type[2] = IBV_GID_TYPE_ROCE_V2;
}

bool has_mask(int mask, int required, int optional) {
  return (mask & required) == required && (mask & ~(required | optional)) == 0;
}

}  // namespace

// ---- exported entry points -------------------------------------------------------------------
extern "C" {

ibv_device**(ibv_get_device_list)(int* n) {
  init_devs();
  int k = g_ndevs.load();
  auto** l = new ibv_device*[k + 1];
  for (int i = 0; i < k; ++i) l[i] = &g_devs[i];
  l[k] = nullptr;
  if (n != nullptr) *n = k;
  return l;
}

void ibv_free_device_list(ibv_device** l) { delete[] l; }

const char* ibv_get_device_name(ibv_device* d) { return d->name; }

ibv_context* ibv_open_device(ibv_device* d) {
  int dev = d == nullptr ? -1 : dev_index(d->name);
  if (dev < 0 || d != &g_devs[dev] || dev >= g_ndevs.load()) {
    errno = ENODEV;
    return nullptr;
  }
  auto* c = new Ctx();
  c->dev = dev;
  c->ctx.device = d;
  c->ctx.cmd_fd = -1;
  c->ctx.async_fd = -1;
  c->ctx.num_comp_vectors = 1;
  c->ctx.abi_compat = nullptr;
  c->ctx.ops.poll_cq = op_poll_cq;
  c->ctx.ops.req_notify_cq = op_req_notify_cq;
  c->ctx.ops.post_send = op_post_send;
  c->ctx.ops.post_recv = op_post_recv;
  uint32_t id = g_ctx_counter.fetch_add(1);
  make_gids(c, id);
  c->bell = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  c->bell_name = "tpfake-bell-" + std::to_string(getpid()) + "-" + std::to_string(id);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, c->bell_name.data(), c->bell_name.size());
  if (c->bell < 0 || bind(c->bell, reinterpret_cast<sockaddr*>(&a),
                          static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 +
                                                 c->bell_name.size())) != 0) {
    int e = errno;
    if (c->bell >= 0) close(c->bell);
    delete c;
    errno = e;
    return nullptr;
  }
  {
    std::lock_guard<std::mutex> lk(g_mu);
    g_ctxs.push_back(c);
  }
  start_hca(c);
  return &c->ctx;
}

int ibv_close_device(ibv_context* cp) {
  Ctx* c = ctx_of(cp);
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!c->qps.empty() || !c->mrs.empty() || c->pds > 0 || c->cqs > 0) return EBUSY;
    c->stop = true;
    std::erase(g_ctxs, c);
  }
  ring_bell(c, c->bell_name.c_str());
  c->hca.join();
  close(c->bell);
  delete c;
  return 0;
}

int ibv_query_device(ibv_context*, ibv_device_attr* a) {
  std::memset(a, 0, sizeof(*a));
  std::snprintf(a->fw_ver, sizeof(a->fw_ver), "tpfake-1");
  a->max_mr_size = kMaxMsg;
  a->max_qp = 1 << 16;
  a->max_qp_wr = kMaxWr;
  a->max_sge = kMaxSge;
  a->max_cq = 1 << 16;
  a->max_cqe = kMaxCqe;
  a->max_mr = 1 << 20;
  a->max_pd = 1 << 16;
  a->phys_port_cnt = 1;
  return 0;
}

int(ibv_query_port)(ibv_context*, uint8_t port, _compat_ibv_port_attr* out) {
  if (port != 1) return EINVAL;
  ibv_port_attr a{};
  a.state = static_cast<ibv_port_state>(g_port_state.load());
  a.max_mtu = IBV_MTU_4096;
  a.active_mtu = IBV_MTU_1024;
  a.gid_tbl_len = kGids;
  a.max_msg_sz = kMaxMsg;
  a.pkey_tbl_len = 1;
  a.active_width = 2;   // 4x
  a.active_speed = 32;  // EDR: 100 Gb/s
  a.phys_state = 5;
  a.link_layer = IBV_LINK_LAYER_ETHERNET;
  // Callers pass a full ibv_port_attr (verbs.h's inline ibv_query_port does).
  std::memcpy(reinterpret_cast<void*>(out), &a, sizeof(a));
  return 0;
}

int ibv_query_gid(ibv_context* cp, uint8_t port, int index, ibv_gid* gid) {
  if (port != 1 || index < 0 || index >= kGids) return EINVAL;
  std::memcpy(gid->raw, ctx_of(cp)->gid[index], 16);
  return 0;
}

int _ibv_query_gid_ex(ibv_context* cp, uint32_t port, uint32_t index, ibv_gid_entry* e,
                      uint32_t flags, size_t size) {
  if (port != 1 || index >= static_cast<uint32_t>(kGids) || flags != 0 || size < sizeof(*e))
    return EINVAL;
  std::memcpy(e->gid.raw, ctx_of(cp)->gid[index], 16);
  e->gid_index = index;
  e->port_num = port;
  e->gid_type = ctx_of(cp)->gid_type[index];
  e->ndev_ifindex = 1;
  return 0;
}

ibv_pd* ibv_alloc_pd(ibv_context* cp) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto* p = new Pd();
  p->pd.context = cp;
  ctx_of(cp)->pds++;
  return &p->pd;
}

int ibv_dealloc_pd(ibv_pd* pp) {
  std::lock_guard<std::mutex> lk(g_mu);
  Pd* p = reinterpret_cast<Pd*>(pp);
  if (p->refs > 0) return EBUSY;
  ctx_of(pp->context)->pds--;
  delete p;
  return 0;
}

ibv_mr*(ibv_reg_mr)(ibv_pd* pd, void* addr, size_t length, int access) {
  bool remote = access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  if (pd == nullptr || (addr == nullptr && length > 0) || length == 0 || length > kMaxMsg ||
      (remote && !(access & IBV_ACCESS_LOCAL_WRITE))) {
    errno = EINVAL;
    return nullptr;
  }
  std::lock_guard<std::mutex> lk(g_mu);
  Ctx* c = ctx_of(pd->context);
  auto* m = new Mr();
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  uint32_t key = ((c->next_key++ & 0xffffff) << 8) | (static_cast<uint32_t>(getpid()) & 0xff);
  m->mr.lkey = m->mr.rkey = key;
  m->access = access;
  c->mrs[key] = m;
  g_stats[c->dev].reg_mr++;
  g_stats[c->dev].live_mrs++;
  reinterpret_cast<Pd*>(pd)->refs++;
  return &m->mr;
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                         unsigned int access) {
  if (iova != reinterpret_cast<uint64_t>(addr)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  return (ibv_reg_mr)(pd, addr, length, static_cast<int>(access));
}

int ibv_dereg_mr(ibv_mr* mp) {
  std::lock_guard<std::mutex> lk(g_mu);
  Ctx* c = ctx_of(mp->context);
  Mr* m = reinterpret_cast<Mr*>(mp);
  c->mrs.erase(mp->lkey);
  g_stats[c->dev].dereg_mr++;
  g_stats[c->dev].live_mrs--;
  reinterpret_cast<Pd*>(mp->pd)->refs--;
  delete m;
  return 0;
}

ibv_comp_channel* ibv_create_comp_channel(ibv_context* cp) {
  int fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
  if (fd < 0) return nullptr;
  auto* ch = new Chan();
  ch->ch.context = cp;
  ch->ch.fd = fd;
  return &ch->ch;
}

int ibv_destroy_comp_channel(ibv_comp_channel* chp) {
  std::lock_guard<std::mutex> lk(g_mu);
  Chan* ch = reinterpret_cast<Chan*>(chp);
  if (ch->ch.refcnt > 0) return EBUSY;
  close(ch->ch.fd);
  delete ch;
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* cp, int cqe, void* cq_context, ibv_comp_channel* ch, int) {
  if (cqe <= 0 || cqe > static_cast<int>(kMaxCqe)) {
    errno = EINVAL;
    return nullptr;
  }
  std::lock_guard<std::mutex> lk(g_mu);
  auto* cq = new Cq();
  cq->cq.context = cp;
  cq->cq.channel = ch;
  cq->cq.cq_context = cq_context;
  cq->cq.cqe = cqe;
  if (ch != nullptr) ch->refcnt++;
  ctx_of(cp)->cqs++;
  return &cq->cq;
}

int ibv_destroy_cq(ibv_cq* cqp) {
  std::lock_guard<std::mutex> lk(g_mu);
  Cq* cq = cq_of(cqp);
  if (cq->refs > 0) return EBUSY;
  if (cqp->channel != nullptr) {
    cqp->channel->refcnt--;
    std::erase(reinterpret_cast<Chan*>(cqp->channel)->events, cqp);
  }
  ctx_of(cqp->context)->cqs--;
  delete cq;
  return 0;
}

int ibv_get_cq_event(ibv_comp_channel* chp, ibv_cq** cq, void** cq_context) {
  uint64_t v;
  if (read(chp->fd, &v, sizeof(v)) != sizeof(v)) return -1;
  std::lock_guard<std::mutex> lk(g_mu);
  Chan* ch = reinterpret_cast<Chan*>(chp);
  if (ch->events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  *cq = ch->events.front();
  ch->events.pop_front();
  *cq_context = (*cq)->cq_context;
  return 0;
}

void ibv_ack_cq_events(ibv_cq*, unsigned int) {}

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* a) {
  const ibv_qp_cap& cap = a->cap;
  if (a->qp_type != IBV_QPT_RC || a->srq != nullptr) {
    errno = EOPNOTSUPP;  // the test device has RC queue pairs only, without SRQ
    return nullptr;
  }
  if (a->send_cq == nullptr || a->recv_cq == nullptr || cap.max_send_wr == 0 ||
      cap.max_send_wr > kMaxWr || cap.max_recv_wr > kMaxWr || cap.max_send_sge > kMaxSge ||
      cap.max_recv_sge > kMaxSge || cap.max_inline_data > kMaxInline ||
      a->send_cq->context != pd->context || a->recv_cq->context != pd->context) {
    errno = EINVAL;
    return nullptr;
  }
  std::lock_guard<std::mutex> lk(g_mu);
  Ctx* c = ctx_of(pd->context);
  auto* q = new Qp();
  uint32_t pid = static_cast<uint32_t>(getpid());
  int fd = -1;
  for (uint32_t i = 0; i < 4096 && fd < 0; ++i) {
    // A process-wide counter: a connected QP's name is gone (unlinked once its peer mapped
    // it), so O_EXCL alone would not keep this process from reusing its number.
    uint32_t qpn = (pid * 4099 + g_qp_counter.fetch_add(1) * 7919) & 0xffffff;
    if (qpn < 2) continue;
    std::string name = "/tpfake-qp-" + std::to_string(qpn);
    fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      q->qp.qp_num = qpn;
      q->own_name = name;
    } else if (errno != EEXIST) {
      break;
    }
  }
  if (fd < 0 || ftruncate(fd, sizeof(Seg)) != 0) {
    int e = errno;
    if (fd >= 0) close(fd), shm_unlink(q->own_name.c_str());
    delete q;
    errno = e;
    return nullptr;
  }
  void* m = mmap(nullptr, sizeof(Seg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    int e = errno;
    shm_unlink(q->own_name.c_str());
    delete q;
    errno = e;
    return nullptr;
  }
  q->own = static_cast<Seg*>(m);
  q->own->pid = static_cast<int32_t>(pid);
  q->own->qpn = q->qp.qp_num;
  std::memcpy(q->own->gid, c->gid, sizeof(c->gid));
  std::memcpy(q->own->gid_type, c->gid_type, sizeof(c->gid_type));
  std::snprintf(q->own->bell, sizeof(q->own->bell), "%s", c->bell_name.c_str());
  q->own->magic = kMagic;
  q->qp.context = pd->context;
  q->qp.qp_context = a->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = a->send_cq;
  q->qp.recv_cq = a->recv_cq;
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = IBV_QPT_RC;
  q->cap = cap;
  q->sig_all = a->sq_sig_all;
  reinterpret_cast<Pd*>(pd)->refs++;
  cq_of(a->send_cq)->refs++;
  cq_of(a->recv_cq)->refs++;
  c->qps.push_back(q);
  return &q->qp;
}

int ibv_modify_qp(ibv_qp* qpp, ibv_qp_attr* a, int mask) {
  std::lock_guard<std::mutex> lk(g_mu);
  Qp* q = qp_of(qpp);
  Ctx* c = ctx_of(qpp->context);
  if (!(mask & IBV_QP_STATE)) return EINVAL;
  if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != q->qp.state) return EINVAL;
  ibv_qp_state from = q->qp.state, to = a->qp_state;
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
    if (mask != IBV_QP_STATE) return EINVAL;
    if (to == IBV_QPS_ERR) {
      set_error(q);
    } else {
      q->qp.state = IBV_QPS_RESET;
      q->sq.clear();
      q->rq.clear();
      q->has_cur = false;
    }
    return 0;
  }
  if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
    if (!has_mask(mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0))
      return EINVAL;
    if (a->port_num != 1 || a->pkey_index != 0) return EINVAL;
    q->port = 1;
    q->access = static_cast<int>(a->qp_access_flags);
  } else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    int req = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    if (!has_mask(mask, req, IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_ALT_PATH))
      return EINVAL;
    const ibv_ah_attr& ah = a->ah_attr;
    // RoCE: the address is the GRH; the MTU may not exceed the port's active MTU.
    if (ah.port_num != 1 || !ah.is_global || ah.grh.sgid_index >= kGids ||
        a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_1024 || a->dest_qp_num == 0 ||
        a->dest_qp_num > 0xffffff || a->rq_psn > 0xffffff)
      return EINVAL;
    std::string name = "/tpfake-qp-" + std::to_string(a->dest_qp_num);
    int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) return EINVAL;  // no such QP: a real HCA would time out; we refuse early
    void* m = mmap(nullptr, sizeof(Seg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return ENOMEM;
    Seg* peer = static_cast<Seg*>(m);
    if (peer->magic != kMagic || peer->qpn != a->dest_qp_num) {
      munmap(m, sizeof(Seg));
      return EINVAL;
    }
    peer->attached.store(1, std::memory_order_release);  // its owner unlinks the name
    q->peer = peer;
    q->reachable = false;
    for (int i = 0; i < kGids; ++i)
      if (std::memcmp(peer->gid[i], ah.grh.dgid.raw, 16) == 0 &&
          peer->gid_type[i] == c->gid_type[ah.grh.sgid_index])
        q->reachable = true;
    q->mtu = a->path_mtu;
    q->dest_qpn = a->dest_qp_num;
    q->rq_psn = a->rq_psn;
    q->min_rnr = a->min_rnr_timer;
    q->sgid_index = ah.grh.sgid_index;
    g_stats[c->dev].last_traffic_class = ah.grh.traffic_class;
    g_stats[c->dev].last_sl = ah.sl;
    if (mask & IBV_QP_ACCESS_FLAGS) q->access = static_cast<int>(a->qp_access_flags);
  } else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
    int req = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
              IBV_QP_MAX_QP_RD_ATOMIC;
    if (!has_mask(mask, req,
                  IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH |
                      IBV_QP_PATH_MIG_STATE))
      return EINVAL;
    if (a->retry_cnt > 7 || a->rnr_retry > 7 || a->timeout > 31 || a->sq_psn > 0xffffff)
      return EINVAL;
    q->sq_psn = a->sq_psn;
    q->timeout = a->timeout;
    q->retry_cnt = a->retry_cnt;
    q->rnr_retry = a->rnr_retry;
    if (mask & IBV_QP_MIN_RNR_TIMER) q->min_rnr = a->min_rnr_timer;
    if (mask & IBV_QP_ACCESS_FLAGS) q->access = static_cast<int>(a->qp_access_flags);
  } else {
    return EINVAL;
  }
  q->qp.state = to;
  return 0;
}

int ibv_query_qp(ibv_qp* qpp, ibv_qp_attr* a, int, ibv_qp_init_attr* init) {
  std::lock_guard<std::mutex> lk(g_mu);
  Qp* q = qp_of(qpp);
  std::memset(a, 0, sizeof(*a));
  a->qp_state = q->qp.state;
  a->cur_qp_state = q->qp.state;
  a->path_mtu = static_cast<ibv_mtu>(q->mtu);
  a->dest_qp_num = q->dest_qpn;
  a->cap = q->cap;
  a->timeout = q->timeout;
  a->retry_cnt = q->retry_cnt;
  a->rnr_retry = q->rnr_retry;
  if (init != nullptr) {
    std::memset(init, 0, sizeof(*init));
    init->cap = q->cap;
    init->qp_type = IBV_QPT_RC;
    init->send_cq = q->qp.send_cq;
    init->recv_cq = q->qp.recv_cq;
  }
  return 0;
}

int ibv_destroy_qp(ibv_qp* qpp) {
  std::lock_guard<std::mutex> lk(g_mu);
  Qp* q = qp_of(qpp);
  Ctx* c = ctx_of(qpp->context);
  std::erase(c->qps, q);
  if (!q->name_gone) shm_unlink(q->own_name.c_str());
  munmap(q->own, sizeof(Seg));
  if (q->peer != nullptr) munmap(q->peer, sizeof(Seg));
  reinterpret_cast<Pd*>(qpp->pd)->refs--;
  cq_of(qpp->send_cq)->refs--;
  cq_of(qpp->recv_cq)->refs--;
  delete q;
  return 0;
}

const char* ibv_wc_status_str(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS:
      return "success";
    case IBV_WC_LOC_LEN_ERR:
      return "local length error";
    case IBV_WC_LOC_QP_OP_ERR:
      return "local QP operation error";
    case IBV_WC_LOC_PROT_ERR:
      return "local protection error";
    case IBV_WC_WR_FLUSH_ERR:
      return "Work Request Flushed Error";
    case IBV_WC_REM_INV_REQ_ERR:
      return "remote invalid request error";
    case IBV_WC_REM_ACCESS_ERR:
      return "remote access error";
    case IBV_WC_REM_OP_ERR:
      return "remote operation error";
    case IBV_WC_RETRY_EXC_ERR:
      return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "RNR retry counter exceeded";
    default:
      return "unknown";
  }
}

int tpfake_force_qp_error(uint32_t qpn) {
  std::lock_guard<std::mutex> lk(g_mu);
  int n = 0;
  for (Ctx* c : g_ctxs)
    for (Qp* q : c->qps)
      if ((qpn == 0 || q->qp.qp_num == qpn) && q->qp.state != IBV_QPS_ERR) {
        set_error(q);
        ++n;
      }
  return n;
}

void tpfake_set_port_state(int state) { g_port_state.store(state); }

int tpfake_set_device_count(int n) {
  if (n < 1 || n > kMaxDevs) return EINVAL;
  g_ndevs.store(n);
  return 0;
}

int tpfake_get_stats(const char* device, tpfake_stats* out) {
  int i = dev_index(device);
  if (i < 0 || out == nullptr) return EINVAL;
  std::lock_guard<std::mutex> lk(g_mu);
  *out = g_stats[i];
  out->fork_init = g_fork_init.load();
  return 0;
}

void tpfake_reset_stats() {
  std::lock_guard<std::mutex> lk(g_mu);
  for (tpfake_stats& s : g_stats) {
    uint64_t live = s.live_mrs;
    s = tpfake_stats{};
    s.live_mrs = live;
    s.last_traffic_class = s.last_sl = -1;
  }
  g_fork_init.store(0);
}

int tpfake_force_device_error(const char* device) {
  int i = dev_index(device);
  if (i < 0) return -1;
  std::lock_guard<std::mutex> lk(g_mu);
  int n = 0;
  for (Ctx* c : g_ctxs)
    if (c->dev == i)
      for (Qp* q : c->qps)
        if (q->qp.state != IBV_QPS_ERR) set_error(q), ++n;
  return n;
}

int ibv_fork_init(void) {
  g_fork_init.store(1);
  return 0;
}

}  // extern "C"
