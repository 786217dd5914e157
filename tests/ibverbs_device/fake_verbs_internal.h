// Internals of the loopback verbs test device (see fake_verbs.h for the model): the layout of the
// shared-memory segments (the wire), the objects behind the ibv_* handles, the process-wide state
// and the functions shared by fake_verbs.cc (the exported entry points) and fake_hca.cc (the
// simulated HCA). Everything here is hidden: the library exports only the entry points.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fake_verbs.h"

// Hidden even though the library is built with default visibility (the entry points).
#pragma GCC visibility push(hidden)
namespace tpfake_internal {

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

// ---- process-wide state (fake_hca.cc) ---------------------------------------------------------

extern std::mutex g_mu;
extern std::vector<Ctx*> g_ctxs;
extern std::atomic<int> g_port_state;
extern std::atomic<uint32_t> g_ctx_counter;
extern std::atomic<uint32_t> g_qp_counter;
constexpr int kMaxDevs = 4;
extern std::atomic<int> g_ndevs;
extern ibv_device g_devs[kMaxDevs];
extern tpfake_stats g_stats[kMaxDevs];  // under g_mu
extern std::atomic<int> g_fork_init;

inline Ctx* ctx_of(ibv_context* c) { return reinterpret_cast<Ctx*>(c); }
inline Qp* qp_of(ibv_qp* q) { return reinterpret_cast<Qp*>(q); }
inline Cq* cq_of(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }

// ---- the HCA (fake_hca.cc) --------------------------------------------------------------------

/// Fills the device table once (names tpfake0..3, counters with no traffic class/SL yet).
void init_devs();
/// The index in g_devs of device `name`, -1 if there is none.
int dev_index(const char* name);
/// Wakes the HCA thread listening on the abstract socket `name` (sent from context c's socket).
void ring_bell(Ctx* c, const char* name);
/// Moves q to the error state, flushing its queued work with IBV_WC_WR_FLUSH_ERR (under g_mu).
void set_error(Qp* q);
/// Starts the HCA thread of context c (c->hca): it services c's QPs when rung, or every kBeatNs
/// while any is connected, until c->stop.
void start_hca(Ctx* c);
/// The context ops ibv_open_device installs (ibv_poll_cq, ibv_req_notify_cq, ibv_post_send and
/// ibv_post_recv are inline in verbs.h and call them).
int op_poll_cq(ibv_cq* cqp, int n, ibv_wc* wc);
int op_req_notify_cq(ibv_cq* cqp, int);
int op_post_send(ibv_qp* qpp, ibv_send_wr* wr, ibv_send_wr** bad);
int op_post_recv(ibv_qp* qpp, ibv_recv_wr* wr, ibv_recv_wr** bad);

}  // namespace tpfake_internal
#pragma GCC visibility pop
