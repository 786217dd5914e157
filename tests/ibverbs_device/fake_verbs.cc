// The loopback verbs test device: see fake_verbs.h for the model and its limits.
#include "fake_verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr uint64_t kMagic = 0x3130717066707474ULL;  // "ttpfpq01"
constexpr int kSlots = 64;
constexpr uint32_t kFrag = 16384;
constexpr int kGids = 3;
constexpr uint32_t kMaxWr = 4096, kMaxSge = 16, kMaxInline = 256, kMaxCqe = 1 << 16;
constexpr uint32_t kMaxMsg = 1u << 30;
constexpr int64_t kBeatNs = 10'000'000;  // HCA thread wake-up while QPs are connected

enum PktType : uint32_t { kSend = 1, kSendImm, kWrite, kWriteImm };
constexpr uint32_t kFirst = 1, kLast = 2;

struct Pkt {
  uint32_t type, psn, flags, len;
  uint64_t seq, raddr;
  uint32_t rkey, imm, total, rnr_retry, status, pad;
  uint8_t data[kFrag];
};

struct Ctl {
  uint32_t status;
  uint64_t seq;
};
constexpr int kCtl = 1024;

// One QP's segment: identity of its owner and the ring its peer writes.
struct Seg {
  uint64_t magic;
  int32_t pid;
  uint32_t qpn;
  uint8_t gid[kGids][16];
  uint32_t gid_type[kGids];
  char bell[64];
  std::atomic<int64_t> beat_ns;
  std::atomic<uint32_t> attached;           // set by the peer at RTR: the owner may unlink the name
  alignas(64) std::atomic<uint64_t> head;   // consumer: the owner
  alignas(64) std::atomic<uint64_t> tail;   // producer: the peer
  alignas(64) std::atomic<uint64_t> chead;  // ACK/NAK ring, apart from data so that a
  alignas(64) std::atomic<uint64_t> ctail;  // receiver-not-ready data never blocks them
  Ctl cring[kCtl];
  Pkt ring[kSlots];
};

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

struct Ctx;
struct Pd {
  ibv_pd pd;
  int refs = 0;
};
struct Mr {
  ibv_mr mr;
  int access;
};
struct Chan {
  ibv_comp_channel ch;
  std::deque<ibv_cq*> events;
};
struct Cq {
  ibv_cq cq;
  std::deque<ibv_wc> q;
  bool overrun = false;
  bool armed = false;
  int refs = 0;
};
struct SWr {
  uint64_t wr_id, seq;
  ibv_wr_opcode op;
  bool signaled, is_inline;
  std::vector<ibv_sge> sge;
  std::vector<uint8_t> inl;
  uint64_t raddr;
  uint32_t rkey, imm, total, sent = 0;
  bool tx_done = false, acked = false;
  int64_t tx_ns = 0;
};
struct RWr {
  uint64_t wr_id;
  std::vector<ibv_sge> sge;
};
struct Ctrl {
  uint32_t status;
  uint64_t seq;
};
struct Qp {
  ibv_qp qp;
  ibv_qp_cap cap;
  int sig_all = 0, port = 0, access = 0;
  uint32_t mtu = 0, dest_qpn = 0, rq_psn = 0, sq_psn = 0;
  uint8_t timeout = 0, retry_cnt = 0, rnr_retry = 0, min_rnr = 0, sgid_index = 0;
  bool reachable = false;
  Seg* own = nullptr;
  std::string own_name;
  bool name_gone = false;  // this process unlinked own_name (only the owner ever does)
  Seg* peer = nullptr;
  std::deque<SWr> sq;
  std::deque<RWr> rq;
  std::deque<Ctrl> ctrl;
  uint64_t next_seq = 1;
  int64_t rnr_since = 0;
  uint64_t skip_seq = 0;  // packets of this message are dropped (NAKed)
  uint64_t msg_seq = 0;   // message being received (SEND scatter state)
  RWr cur;
  bool has_cur = false;
};
struct Ctx {
  ibv_context ctx;
  int dev = 0;  // index in g_devs
  int bell = -1;
  std::string bell_name;
  std::thread hca;
  bool stop = false;
  uint8_t gid[kGids][16];
  uint32_t gid_type[kGids];
  std::vector<Qp*> qps;
  std::map<uint32_t, Mr*> mrs;
  uint32_t next_key = 1;
  int pds = 0, cqs = 0;
};

std::mutex g_mu;
std::vector<Ctx*> g_ctxs;
std::atomic<int> g_port_state{IBV_PORT_ACTIVE};
std::atomic<uint32_t> g_ctx_counter{0};
std::atomic<uint32_t> g_qp_counter{0};
constexpr int kMaxDevs = 4;
std::atomic<int> g_ndevs{1};
ibv_device g_devs[kMaxDevs] = {};
std::once_flag g_devs_once;
tpfake_stats g_stats[kMaxDevs] = {};  // under g_mu
std::atomic<int> g_fork_init{0};

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

Ctx* ctx_of(ibv_context* c) { return reinterpret_cast<Ctx*>(c); }
Qp* qp_of(ibv_qp* q) { return reinterpret_cast<Qp*>(q); }
Cq* cq_of(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }

void ring_bell(Ctx* c, const char* name) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  size_t n = std::strlen(name);
  std::memcpy(a.sun_path + 1, name, n);
  (void)!sendto(c->bell, "b", 1, MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&a),
                static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n));
}

void push_cqe(ibv_cq* cqp, const ibv_wc& wc);

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
  c->hca = std::thread(hca_loop, c);
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
