// The simulated wire and HCA of the loopback verbs test device (see fake_verbs.h for the model):
// the device table and process-wide state, the packet path (tx, rx, transport timers), the HCA
// thread of each context and the context ops (poll_cq, req_notify_cq, post_send, post_recv).
// What fake_verbs.cc uses is declared (hidden) in fake_verbs_internal.h; the rest stays in the
// anonymous namespace: the library exports only the entry points.
#include <errno.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "fake_verbs_internal.h"

namespace tpfake_internal {

std::mutex g_mu;
std::vector<Ctx*> g_ctxs;
std::atomic<int> g_port_state{IBV_PORT_ACTIVE};
std::atomic<uint32_t> g_ctx_counter{0};
std::atomic<uint32_t> g_qp_counter{0};
std::atomic<int> g_ndevs{1};
ibv_device g_devs[kMaxDevs] = {};
tpfake_stats g_stats[kMaxDevs] = {};  // under g_mu
std::atomic<int> g_fork_init{0};

namespace {
std::once_flag g_devs_once;
}  // namespace

void init_devs() {
  std::call_once(g_devs_once, [] {
    for (int i = 0; i < kMaxDevs; ++i) {
      ibv_device& d = g_devs[i];
      d.node_type = IBV_NODE_CA;
      d.transport_type = IBV_TRANSPORT_IB;
      std::snprintf(d.name, sizeof(d.name), "tpfake%d", i);
      std::snprintf(d.dev_name, sizeof(d.dev_name), "uverbs_tpfake%d", i);
    }
    for (tpfake_stats& st : g_stats) st.last_traffic_class = st.last_sl = -1;
  });
}

int dev_index(const char* name) {
  init_devs();
  for (int i = 0; i < kMaxDevs; ++i)
    if (name != nullptr && std::strcmp(g_devs[i].name, name) == 0) return i;
  return -1;
}

void ring_bell(Ctx* c, const char* name) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  size_t n = std::strlen(name);
  std::memcpy(a.sun_path + 1, name, n);
  (void)!sendto(c->bell, "b", 1, MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&a),
                static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n));
}

namespace {

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void push_cqe(ibv_cq* cqp, const ibv_wc& wc) {
  Cq* cq = cq_of(cqp);
  if (cq->overrun) return;
  if (cq->q.size() >= static_cast<size_t>(cq->cq.cqe)) {
    cq->overrun = true;
    for (Qp* q : ctx_of(cq->cq.context)->qps)
      if (q->qp.send_cq == cqp || q->qp.recv_cq == cqp) set_error(q);
    return;
  }
  cq->q.push_back(wc);
  if (cq->armed && cq->cq.channel != nullptr) {
    cq->armed = false;
    Chan* ch = reinterpret_cast<Chan*>(cq->cq.channel);
    ch->events.push_back(cqp);
    uint64_t one = 1;
    (void)!write(ch->ch.fd, &one, sizeof(one));
  }
}

Mr* find_mr(Ctx* c, uint32_t key) {
  auto it = c->mrs.find(key);
  return it == c->mrs.end() ? nullptr : it->second;
}

bool in_mr(const Mr* m, uint64_t addr, uint64_t len) {
  uint64_t b = reinterpret_cast<uint64_t>(m->mr.addr);
  return addr >= b && len <= m->mr.length && addr - b <= m->mr.length - len;
}

// Checks a local SGE list: same PD, inside the region, LOCAL_WRITE when written to.
bool sges_ok(Qp* q, const std::vector<ibv_sge>& s, bool write) {
  Ctx* c = ctx_of(q->qp.context);
  for (const ibv_sge& e : s) {
    Mr* m = find_mr(c, e.lkey);
    if (m == nullptr || m->mr.pd != q->qp.pd || !in_mr(m, e.addr, e.length)) return false;
    if (write && !(m->access & IBV_ACCESS_LOCAL_WRITE)) return false;
  }
  return true;
}

// Copies [off, off+len) of the message described by `s` to/from `buf`.
void sge_copy(const std::vector<ibv_sge>& s, uint64_t off, uint8_t* buf, uint32_t len,
              bool to_sge) {
  for (const ibv_sge& e : s) {
    if (len == 0) return;
    if (off >= e.length) {
      off -= e.length;
      continue;
    }
    uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(e.length - off, len));
    uint8_t* p = reinterpret_cast<uint8_t*>(e.addr + off);
    if (to_sge)
      std::memcpy(p, buf, n);
    else
      std::memcpy(buf, p, n);
    buf += n;
    len -= n;
    off = 0;
  }
}

Pkt* slot(Seg* s) {
  uint64_t t = s->tail.load(std::memory_order_relaxed);
  if (t - s->head.load(std::memory_order_acquire) >= kSlots) return nullptr;
  return &s->ring[t % kSlots];
}
void publish(Seg* s) { s->tail.fetch_add(1, std::memory_order_release); }

bool wants_recv(uint32_t t) { return t == kSend || t == kSendImm || t == kWriteImm; }

void complete_front(Qp* q) {
  while (!q->sq.empty() && q->sq.front().acked) {
    SWr& w = q->sq.front();
    bool signaled = w.signaled;
    ibv_wc wc{};
    wc.wr_id = w.wr_id;
    wc.status = IBV_WC_SUCCESS;
    wc.opcode =
        (w.op == IBV_WR_SEND || w.op == IBV_WR_SEND_WITH_IMM) ? IBV_WC_SEND : IBV_WC_RDMA_WRITE;
    wc.qp_num = q->qp.qp_num;
    q->sq.pop_front();
    if (signaled) push_cqe(q->qp.send_cq, wc);  // may overrun and flush the queue
  }
}

void fail_wr(Qp* q, uint64_t seq, ibv_wc_status st) {
  for (auto it = q->sq.begin(); it != q->sq.end(); ++it) {
    if (it->seq != seq) continue;
    ibv_wc wc{};
    wc.wr_id = it->wr_id;
    wc.status = st;
    wc.qp_num = q->qp.qp_num;
    q->sq.erase(it);
    push_cqe(q->qp.send_cq, wc);
    break;
  }
  set_error(q);
}

// Sends queued ACK/NAKs, then the data of the send queue, in order, as the ring allows.
void tx(Qp* q, int64_t now) {
  if (q->peer == nullptr) return;
  bool rang = false;
  bool down = g_port_state.load() != IBV_PORT_ACTIVE;
  while (!q->ctrl.empty()) {
    Seg* ps = q->peer;
    uint64_t t = ps->ctail.load(std::memory_order_relaxed);
    if (t - ps->chead.load(std::memory_order_acquire) >= kCtl) break;
    Ctrl c = q->ctrl.front();
    q->ctrl.pop_front();
    if (down) continue;
    ps->cring[t % kCtl] = {c.status, c.seq};
    ps->ctail.store(t + 1, std::memory_order_release);
    rang = true;
  }
  if (q->qp.state != IBV_QPS_RTS) return;
  for (SWr& w : q->sq) {
    if (w.tx_done) continue;
    if (w.sent == 0 && !w.is_inline && !sges_ok(q, w.sge, false)) {
      fail_wr(q, w.seq, IBV_WC_LOC_PROT_ERR);
      return;
    }
    while (!w.tx_done) {
      if (!q->reachable || down) {  // the packets go nowhere
        w.sent = w.total;
        w.tx_done = true;
        w.tx_ns = now;
        break;
      }
      Pkt* p = slot(q->peer);
      if (p == nullptr) break;
      uint32_t len = std::min(kFrag, w.total - w.sent);
      p->type = w.op == IBV_WR_SEND            ? kSend
                : w.op == IBV_WR_SEND_WITH_IMM ? kSendImm
                : w.op == IBV_WR_RDMA_WRITE    ? kWrite
                                               : kWriteImm;
      p->psn = q->sq_psn;
      q->sq_psn = (q->sq_psn + 1) & 0xffffff;
      p->flags = (w.sent == 0 ? kFirst : 0) | (w.sent + len == w.total ? kLast : 0);
      p->len = len;
      p->seq = w.seq;
      p->raddr = w.raddr + w.sent;
      p->rkey = w.rkey;
      p->imm = w.imm;
      p->total = w.total;
      p->rnr_retry = q->rnr_retry;
      if (w.is_inline)
        std::memcpy(p->data, w.inl.data() + w.sent, len);
      else
        sge_copy(w.sge, w.sent, p->data, len, false);
      publish(q->peer);
      rang = true;
      w.sent += len;
      if (w.sent == w.total) {
        w.tx_done = true;
        w.tx_ns = now;
      }
    }
    if (!w.tx_done) break;
  }
  if (rang) ring_bell(ctx_of(q->qp.context), q->peer->bell);
}

int64_t rnr_ns(uint8_t t) {
  static const double kMs[32] = {655.36, 0.01,  0.02,  0.03,   0.04,   0.06,   0.08,   0.12,
                                 0.16,   0.24,  0.32,  0.48,   0.64,   0.96,   1.28,   1.92,
                                 2.56,   3.84,  5.12,  7.68,   10.24,  15.36,  20.48,  30.72,
                                 40.96,  61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52};
  return static_cast<int64_t>(kMs[t & 31] * 1e6);
}

// Drains this QP's ring: ACK/NAKs for our sends, data for our memory and receives.
void rx(Qp* q, int64_t now) {
  if (q->own == nullptr || q->peer == nullptr) return;
  Ctx* c = ctx_of(q->qp.context);
  Seg* s = q->own;
  while (s->chead.load(std::memory_order_relaxed) != s->ctail.load(std::memory_order_acquire)) {
    uint64_t h = s->chead.load(std::memory_order_relaxed);
    Ctl k = s->cring[h % kCtl];
    s->chead.store(h + 1, std::memory_order_release);
    if (q->qp.state == IBV_QPS_ERR || q->qp.state == IBV_QPS_RESET) continue;
    if (k.status != IBV_WC_SUCCESS) {
      fail_wr(q, k.seq, static_cast<ibv_wc_status>(k.status));
    } else {
      for (SWr& w : q->sq)
        if (w.seq == k.seq) w.acked = true;
      complete_front(q);
    }
  }
  while (s->head.load(std::memory_order_relaxed) != s->tail.load(std::memory_order_acquire)) {
    Pkt* p = &s->ring[s->head.load(std::memory_order_relaxed) % kSlots];
    if (q->qp.state == IBV_QPS_ERR || q->qp.state == IBV_QPS_RESET) {
      s->head.fetch_add(1, std::memory_order_release);
      continue;
    }
    bool first = p->flags & kFirst, last = p->flags & kLast;
    if (p->seq == q->skip_seq) {
      q->rq_psn = (q->rq_psn + 1) & 0xffffff;
      s->head.fetch_add(1, std::memory_order_release);
      continue;
    }
    if (p->psn != q->rq_psn) {  // the sender's sq_psn is not our rq_psn: it never gets an ACK
      q->ctrl.push_back({IBV_WC_RETRY_EXC_ERR, p->seq});
      q->skip_seq = p->seq;
      s->head.fetch_add(1, std::memory_order_release);
      continue;
    }
    auto nak = [&](ibv_wc_status st) {
      q->ctrl.push_back({static_cast<uint32_t>(st), p->seq});
      q->skip_seq = p->seq;
      q->rq_psn = (q->rq_psn + 1) & 0xffffff;
      s->head.fetch_add(1, std::memory_order_release);
    };
    if (first) {
      if (wants_recv(p->type) && q->rq.empty()) {
        if (q->rnr_since == 0) q->rnr_since = now;
        int64_t attempts = (now - q->rnr_since) / std::max<int64_t>(rnr_ns(q->min_rnr), 1);
        if (p->rnr_retry != 7 && attempts > static_cast<int64_t>(p->rnr_retry)) {
          q->rnr_since = 0;
          nak(IBV_WC_RNR_RETRY_EXC_ERR);
          continue;
        }
        break;  // receiver not ready: wait for a receive (the HCA thread retries)
      }
      q->rnr_since = 0;
      if ((p->type == kWrite || p->type == kWriteImm) && p->total > 0) {  // 0 bytes: no key
        Mr* m = find_mr(c, p->rkey);
        if (m == nullptr || m->mr.pd != q->qp.pd || !(m->access & IBV_ACCESS_REMOTE_WRITE) ||
            !(q->access & IBV_ACCESS_REMOTE_WRITE) || !in_mr(m, p->raddr, p->total)) {
          nak(IBV_WC_REM_ACCESS_ERR);
          continue;
        }
      }
      if (p->type == kSend || p->type == kSendImm) {
        uint64_t room = 0;
        for (const ibv_sge& e : q->rq.front().sge) room += e.length;
        bool ok = sges_ok(q, q->rq.front().sge, true);
        if (room < p->total || !ok) {
          ibv_wc wc{};
          wc.wr_id = q->rq.front().wr_id;
          wc.status = ok ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR;
          wc.opcode = IBV_WC_RECV;
          wc.qp_num = q->qp.qp_num;
          q->rq.pop_front();
          push_cqe(q->qp.recv_cq, wc);
          nak(IBV_WC_REM_INV_REQ_ERR);
          set_error(q);
          continue;
        }
      }
      if (wants_recv(p->type)) {
        q->cur = q->rq.front();
        q->rq.pop_front();
        q->has_cur = true;
      }
      q->msg_seq = p->seq;
    }
    uint64_t off = static_cast<uint64_t>(p->raddr);
    if (p->type == kWrite || p->type == kWriteImm) {
      std::memcpy(reinterpret_cast<void*>(off), p->data, p->len);
    } else {
      // raddr of a send fragment is its offset in the message
      sge_copy(q->cur.sge, off, p->data, p->len, true);
    }
    q->rq_psn = (q->rq_psn + 1) & 0xffffff;
    if (last) {
      if (wants_recv(p->type) && q->has_cur) {
        ibv_wc wc{};
        wc.wr_id = q->cur.wr_id;
        wc.status = IBV_WC_SUCCESS;
        wc.opcode = p->type == kWriteImm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
        wc.byte_len = p->total;
        if (p->type != kSend) {
          wc.imm_data = p->imm;
          wc.wc_flags = IBV_WC_WITH_IMM;
        }
        wc.qp_num = q->qp.qp_num;
        wc.src_qp = q->dest_qpn;
        q->has_cur = false;
        push_cqe(q->qp.recv_cq, wc);
      }
      q->ctrl.push_back({IBV_WC_SUCCESS, p->seq});
    }
    s->head.fetch_add(1, std::memory_order_release);
  }
}

// Transport timer: the oldest unacknowledged send fails when the peer's HCA has been silent
// for timeout * (retry_cnt + 1) since it was sent.
void timers(Qp* q, int64_t now) {
  if (q->qp.state != IBV_QPS_RTS || q->sq.empty() || q->timeout == 0) return;
  SWr& w = q->sq.front();
  if (!w.tx_done || w.acked) return;
  int64_t limit =
      static_cast<int64_t>(4096.0 * static_cast<double>(1ull << q->timeout)) * (q->retry_cnt + 1);
  int64_t ref = w.tx_ns;
  if (q->reachable && g_port_state.load() == IBV_PORT_ACTIVE)
    ref = std::max(ref, q->peer->beat_ns.load(std::memory_order_relaxed));
  if (now - ref > limit) fail_wr(q, w.seq, IBV_WC_RETRY_EXC_ERR);
}

void service(Ctx* c) {
  int64_t now = now_ns();
  for (Qp* q : c->qps) {
    // Only the owner unlinks its name, once its peer has the segment mapped: a name unlinked
    // by anyone else could by then belong to a new QP of another process with the same number.
    if (!q->name_gone && q->own->attached.load(std::memory_order_acquire) != 0) {
      shm_unlink(q->own_name.c_str());
      q->name_gone = true;
    }
    if (q->qp.state == IBV_QPS_RTR || q->qp.state == IBV_QPS_RTS)
      q->own->beat_ns.store(now, std::memory_order_relaxed);
    rx(q, now);
    tx(q, now);
    timers(q, now);
  }
}

void hca_loop(Ctx* c) {
  char buf[64];
  for (;;) {
    int wait = 100;
    {
      std::lock_guard<std::mutex> lk(g_mu);
      if (c->stop) return;
      for (Qp* q : c->qps)
        if (q->peer != nullptr) wait = static_cast<int>(kBeatNs / 1'000'000);
    }
    pollfd pfd{c->bell, POLLIN, 0};
    poll(&pfd, 1, wait);
    while (recv(c->bell, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
    }
    std::lock_guard<std::mutex> lk(g_mu);
    if (c->stop) return;
    service(c);
  }
}

}  // namespace

void set_error(Qp* q) {
  if (q->qp.state == IBV_QPS_ERR) return;
  q->qp.state = IBV_QPS_ERR;
  std::deque<SWr> sq;
  sq.swap(q->sq);
  for (SWr& w : sq) {
    ibv_wc wc{};
    wc.wr_id = w.wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.qp_num = q->qp.qp_num;
    push_cqe(q->qp.send_cq, wc);
  }
  if (q->has_cur) q->rq.push_front(q->cur), q->has_cur = false;
  std::deque<RWr> rq;
  rq.swap(q->rq);
  for (RWr& r : rq) {
    ibv_wc wc{};
    wc.wr_id = r.wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = q->qp.qp_num;
    push_cqe(q->qp.recv_cq, wc);
  }
}

// Starts context c's HCA thread. The thread runs a lambda of this file, not hca_loop itself:
// std::thread's state for a function pointer would be exported from the library.
void start_hca(Ctx* c) {
  c->hca = std::thread([c] { hca_loop(c); });
}

// ---- context ops -----------------------------------------------------------------------------

int op_poll_cq(ibv_cq* cqp, int n, ibv_wc* wc) {
  std::lock_guard<std::mutex> lk(g_mu);
  Cq* cq = cq_of(cqp);
  service(ctx_of(cqp->context));
  if (cq->overrun) return -EOVERFLOW;
  int k = 0;
  while (k < n && !cq->q.empty()) {
    wc[k++] = cq->q.front();
    cq->q.pop_front();
  }
  return k;
}

int op_req_notify_cq(ibv_cq* cqp, int) {
  std::lock_guard<std::mutex> lk(g_mu);
  cq_of(cqp)->armed = true;
  return 0;
}

int op_post_send(ibv_qp* qpp, ibv_send_wr* wr, ibv_send_wr** bad) {
  std::lock_guard<std::mutex> lk(g_mu);
  Qp* q = qp_of(qpp);
  int64_t now = now_ns();
  for (; wr != nullptr; wr = wr->next) {
    int err = 0;
    if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR)
      err = EINVAL;
    else if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > q->cap.max_send_sge)
      err = EINVAL;
    else if (q->sq.size() >= q->cap.max_send_wr)
      err = ENOMEM;
    else if (wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM &&
             wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM)
      err = EINVAL;  // RDMA read and atomics are not emulated
    SWr w{};
    uint64_t total = 0;
    if (err == 0) {
      for (int i = 0; i < wr->num_sge; ++i) total += wr->sg_list[i].length;
      if (total > kMaxMsg) err = EINVAL;
      if ((wr->send_flags & IBV_SEND_INLINE) && total > q->cap.max_inline_data) err = EINVAL;
    }
    if (err != 0) {
      *bad = wr;
      return err;
    }
    w.wr_id = wr->wr_id;
    w.seq = q->next_seq++;
    w.op = wr->opcode;
    w.signaled = q->sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
    w.is_inline = wr->send_flags & IBV_SEND_INLINE;
    w.sge.assign(wr->sg_list, wr->sg_list + wr->num_sge);
    w.total = static_cast<uint32_t>(total);
    if (w.is_inline) {
      w.inl.resize(total);
      sge_copy(w.sge, 0, w.inl.data(), w.total, false);
    }
    if (w.op == IBV_WR_RDMA_WRITE || w.op == IBV_WR_RDMA_WRITE_WITH_IMM) {
      w.raddr = wr->wr.rdma.remote_addr;
      w.rkey = wr->wr.rdma.rkey;
    } else {
      w.raddr = 0;  // offset in the message
    }
    w.imm = wr->imm_data;
    tpfake_stats& st = g_stats[ctx_of(qpp->context)->dev];
    st.tx_bytes += total;
    st.tx_wrs++;
    q->sq.push_back(std::move(w));
    if (q->qp.state == IBV_QPS_ERR) {
      q->qp.state = IBV_QPS_SQE;  // set_error flushes what is queued
      set_error(q);
    }
  }
  tx(q, now);
  return 0;
}

int op_post_recv(ibv_qp* qpp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  std::lock_guard<std::mutex> lk(g_mu);
  Qp* q = qp_of(qpp);
  for (; wr != nullptr; wr = wr->next) {
    int err = 0;
    if (q->qp.state == IBV_QPS_RESET)
      err = EINVAL;
    else if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > q->cap.max_recv_sge)
      err = EINVAL;
    else if (q->rq.size() >= q->cap.max_recv_wr)
      err = ENOMEM;
    if (err != 0) {
      *bad = wr;
      return err;
    }
    q->rq.push_back({wr->wr_id, std::vector<ibv_sge>(wr->sg_list, wr->sg_list + wr->num_sge)});
    if (q->qp.state == IBV_QPS_ERR) {
      q->qp.state = IBV_QPS_SQE;
      set_error(q);
    }
  }
  int64_t now = now_ns();
  rx(q, now);
  tx(q, now);
  return 0;
}

}  // namespace tpfake_internal
