// ucx_ab: tpcomm over its ucx transport against raw UCP tag streaming in the SAME two
// processes, in alternating bursts, so that the machine's drift (a VM's tcp phases, the
// minute's memory bandwidth) falls on both alike and each round gives its own ratio.
//
// Each rank holds a tpcomm ProcessGroup (backend ucx) and its own UCP context, worker and
// endpoint (UCX_TLS applies to both; TPCOMM_UCX_TLS to tpcomm only). A round runs, in an order
// that rotates by round, one burst of each contender: `count` messages of `size` bytes through
// a sliding window of W (the sender keeps W sends in flight, the receiver W receives posted,
// the next posted as soon as the oldest completes, as ucx_perftest's tag_bw does), timed on
// the sender from a line-up to the last send completion. Contenders:
//   tpcomm   ProcessGroup::isend/irecv, receives into the W receive buffers
//   raw      ucp_tag_send_nbx/ucp_tag_recv_nbx into the same W receive buffers
//   raw1     (--raw-one) raw, every receive into ONE buffer: tag_bw's own pattern, which
//            tpcomm refuses (two pending receives into the same memory are an error there)
//   rawcfg   (--raw-cfg) raw on a second context made with the ucx transport's parameters
//            (features TAG, RMA, WAKEUP, AM; serialized worker; --cfg NAME=VALUE adds UCP
//            settings to it): what UCX does differently under tpcomm's configuration
//   rawam    (--raw-am) rendezvous active messages on that context, the data taken after the
//            progress call returns: the form the ucx transport sends tagged data in
//   rawsplit (--split K) raw with every message in K parts over K endpoints (own connections)
//   trans    (--trans) tpcomm's ucx transport driven directly (send_tagged_with_message,
//            recv_tagged, a minimal sink and a tight progress loop): tpcomm minus its engine
// --no-tpcomm leaves the ProcessGroup out altogether (raw contenders only). --poll: the tpcomm
// contender polls Work::is_completed() in a loop instead of calling wait().
// Receive buffers: W distinct buffers, or with --alias W views of one memory file (distinct
// addresses over the same physical pages: one buffer's cache footprint, p2p_bench --alias-recv).
//
//   UCX_TLS=tcp bin/ucx_ab --size 1M --window 32 --alias --rounds 20 --pin [--raw-one]
//   UCX_TLS=tcp bin/ucx_ab --size 1M --window 1 --rounds 3 --count 4096 --pin --trans
//
// Rounds of one run agree to a few percent, runs to about +-10% (each run's connections keep
// their own state): compare variants over several runs.
//
// Prints each round's GB/s (1e9 B/s) and ratios, then the medians and the median of the
// per-round ratios with its quartiles. --timeline FILE: every burst's start and end
// (CLOCK_MONOTONIC ns, as perf record -k mono stamps its samples) and contender, from rank 0
// and rank 1, for splitting a profile by contender.
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_buffer.h"
#include "bench/ucx_bench_util.h"
#include "tpcomm/tpcomm.hpp"
#include "tpcomm/transport/transport.hpp"

namespace {

using namespace tpcomm;
using bench::BenchBuffer;
using ucx_bench::die;
using ucx_bench::parse_size;
using ucx_bench::swap_blob;
using Clock = std::chrono::steady_clock;

struct Args {
  size_t size = 1 << 20;
  int window = 32;
  int rounds = 20;
  int count = 0;  // per burst; 0: about 256 MiB of data, at least 2 windows
  bool alias = false;
  bool raw_one = false;
  bool pin = false;
  bool no_tpcomm = false;        // --no-tpcomm: no ProcessGroup at all (raw contenders only)
  bool raw_cfg = false;          // --raw-cfg: also raw streaming on a context set up as tpcomm's
  std::vector<std::string> cfg;  // --cfg NAME=VALUE: UCX settings of the --raw-cfg context
  int split = 0;        // --split K: also raw with each message in K parts over K endpoints
  bool raw_am = false;  // --raw-am: also raw rendezvous active messages (tpcomm's form)
  bool trans = false;   // --trans: also tpcomm's ucx transport without the engine
  bool poll = false;    // --poll: tpcomm polls Work::is_completed() instead of wait()
  std::string timeline;
};

int64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// ---- raw UCP ---------------------------------------------------------------------------

struct Raw {
  ucp_context_h ctx = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;
  std::vector<ucp_ep_h> more;  // --split K: K-1 more endpoints to the same peer (own connections)

  // Context, worker and endpoint, worker addresses swapped over the bootstrap socket. With
  // `like_tpcomm`, the context and worker get the parameters the ucx transport gives its own
  // (transports/ucx/ucx_transport.cc: features TAG, RMA, WAKEUP and AM, a serialized worker
  // with wake-up events), so that what UCX does differently under them shows apart from what
  // tpcomm's engine costs.
  Raw(int fd, bool like_tpcomm, const std::vector<std::string>& settings = {}) {
    ucp_params_t p{};
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_TAG;
    if (like_tpcomm) {
      p.field_mask |= UCP_PARAM_FIELD_ESTIMATED_NUM_EPS | UCP_PARAM_FIELD_TAG_SENDER_MASK;
      p.features |= UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP | UCP_FEATURE_AM;
      p.estimated_num_eps = 2;
      p.tag_sender_mask = 0xffffffffull;
    }
    ucp_config_t* cfg = nullptr;
    ucs_status_t st = ucp_config_read(nullptr, nullptr, &cfg);
    if (st != UCS_OK) die("ucp_config_read", st);
    for (const std::string& kv : settings) {  // NAME=VALUE, UCX's names without UCX_
      size_t eq = kv.find('=');
      if (eq == std::string::npos) die("--cfg wants NAME=VALUE, got '" + kv + "'");
      st = ucp_config_modify(cfg, kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str());
      if (st != UCS_OK) die("ucp_config_modify " + kv, st);
    }
    st = ucp_init(&p, cfg, &ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) die("ucp_init", st);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (like_tpcomm) {
      wp.field_mask |= UCP_WORKER_PARAM_FIELD_EVENTS;
      wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
      wp.events = UCP_WAKEUP_RMA | UCP_WAKEUP_TAG_SEND | UCP_WAKEUP_TAG_RECV | UCP_WAKEUP_TX |
                  UCP_WAKEUP_RX;
    }
    if ((st = ucp_worker_create(ctx, &wp, &worker)) != UCS_OK) die("ucp_worker_create", st);
    ucp_address_t* addr = nullptr;
    size_t len = 0;
    if ((st = ucp_worker_get_address(worker, &addr, &len)) != UCS_OK)
      die("ucp_worker_get_address", st);
    std::vector<uint8_t> peer = swap_blob(fd, addr, len);
    ucp_worker_release_address(worker, addr);
    ucp_ep_params_t ep_params{};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address = reinterpret_cast<const ucp_address_t*>(peer.data());
    if ((st = ucp_ep_create(worker, &ep_params, &ep)) != UCS_OK) die("ucp_ep_create", st);
    peer_addr = std::move(peer);
  }
  std::vector<uint8_t> peer_addr;

  // --raw-am: rendezvous active messages, as tpcomm's ucx transport sends tagged data
  // (ucp_am_send_nbx with UCP_AM_SEND_FLAG_RNDV); the receiver keeps each arrival's descriptor
  // and takes the data (ucp_am_recv_data_nbx) after the progress call, as tpcomm's engine does.
  std::vector<void*> arrived;
  static ucs_status_t on_am(void* arg, const void*, size_t, void* data, size_t,
                            const ucp_am_recv_param_t* param) {
    auto* self = static_cast<Raw*>(arg);
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) die("raw AM arrived eagerly");
    self->arrived.push_back(data);
    return UCS_INPROGRESS;
  }
  void enable_am() {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = 5;
    hp.cb = on_am;
    hp.arg = this;
    if (ucs_status_t st = ucp_worker_set_am_recv_handler(worker, &hp); st != UCS_OK)
      die("ucp_worker_set_am_recv_handler", st);
  }
  void* am_send(const void* buf, size_t n) const {
    static const uint64_t hdr = 0;
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_AM_SEND_FLAG_RNDV;
    return ucp_am_send_nbx(ep, 5, &hdr, sizeof hdr, buf, n, &rp);
  }
  // The next arrival's data into buf (progressing until one arrived).
  void* am_take(void* buf, size_t n) {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (arrived.empty()) {
      ucp_worker_progress(worker);
      if (Clock::now() > deadline) die("raw AM: nothing arrived within 60 s");
    }
    void* desc = arrived.front();
    arrived.erase(arrived.begin());
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    rp.datatype = ucp_dt_make_contig(1);
    return ucp_am_recv_data_nbx(worker, desc, buf, n, &rp);
  }

  // Endpoints 1..k-1 for split messages.
  void add_endpoints(int k) {
    while (static_cast<int>(more.size()) + 1 < k) {
      ucp_ep_params_t ep_params{};
      ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
      ep_params.address = reinterpret_cast<const ucp_address_t*>(peer_addr.data());
      ucp_ep_h e = nullptr;
      if (ucs_status_t st = ucp_ep_create(worker, &ep_params, &e); st != UCS_OK)
        die("ucp_ep_create", st);
      more.push_back(e);
    }
  }
  void* send_on(int k, const void* buf, size_t n, ucp_tag_t tag) const {
    ucp_request_param_t rp{};
    return ucp_tag_send_nbx(k == 0 ? ep : more[static_cast<size_t>(k - 1)], buf, n, tag, &rp);
  }

  // Waits for a request (nullptr: done at once) and frees it; 60 s at most.
  void wait(void* req) const {
    if (req == nullptr) return;
    if (UCS_PTR_IS_ERR(req)) die("raw UCX operation failed", UCS_PTR_STATUS(req));
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    for (unsigned spins = 0; ucp_request_check_status(req) == UCS_INPROGRESS; ++spins) {
      ucp_worker_progress(worker);
      if ((spins & 1023) == 0 && Clock::now() > deadline)
        die("raw UCX: no completion within 60 s (is the other rank alive?)");
    }
    ucs_status_t st = ucp_request_check_status(req);
    ucp_request_free(req);
    if (st != UCS_OK) die("raw UCX operation completed with an error", st);
  }
  void* send(const void* buf, size_t n, ucp_tag_t tag) const {
    ucp_request_param_t rp{};
    return ucp_tag_send_nbx(ep, buf, n, tag, &rp);
  }
  void* recv(void* buf, size_t n, ucp_tag_t tag) const {
    ucp_request_param_t rp{};
    return ucp_tag_recv_nbx(worker, buf, n, tag, ~ucp_tag_t{0}, &rp);
  }
  void line_up(int rank) const {
    char x = 0;
    if (rank == 0) {
      wait(send(&x, 1, 7));
      wait(recv(&x, 1, 8));
    } else {
      wait(recv(&x, 1, 7));
      wait(send(&x, 1, 8));
    }
  }
  // A close that does not wait for a peer that may be gone.
  ~Raw() {
    ucp_request_param_t cp{};
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    more.push_back(ep);
    for (ucp_ep_h e : more) {
      void* r = ucp_ep_close_nbx(e, &cp);
      if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
        const auto deadline = Clock::now() + std::chrono::seconds(5);
        while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < deadline)
          ucp_worker_progress(worker);
        ucp_request_free(r);
      }
    }
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
  }
};

// ---- tpcomm's ucx transport without the engine (--trans) --------------------------------

// The ucx transport driven directly: send_tagged_with_message and recv_tagged with a minimal
// sink, as the engine drives them but without its matching, Work objects, locks and waits.
// The gap between it and tpcomm is the engine's cost; between it and rawam the transport's.
struct Trans : transport::EventSink {
  std::unique_ptr<transport::Transport> tr;
  transport::Endpoint* ep = nullptr;
  int peer = -1;
  std::vector<uint64_t> arrived_ids;  // on_message: ids whose data can be taken
  uint64_t done_sends = 0, done_recvs = 0;

  Trans(int rank, int fd) {
    transport::TransportContext ctx;
    ctx.rank = rank;
    ctx.world_size = 2;
    ctx.job_id = "ucx_ab";
    tr = transport::create_transport("ucx", ctx);
    std::vector<uint8_t> mine = tr->address();
    std::vector<uint8_t> theirs = swap_blob(fd, mine.data(), mine.size());
    peer = 1 - rank;
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    ep = &tr->connect(peer, theirs, deadline);
    while (!ep->ready()) {
      tr->progress(*this);
      if (Clock::now() > deadline) die("--trans: no connection within 60 s");
    }
  }
  void on_message(int, std::span<const uint8_t> data) override {
    uint64_t id = 0;
    if (data.size() >= sizeof id) std::memcpy(&id, data.data(), sizeof id);
    arrived_ids.push_back(id);
  }
  void on_put_arrived(int, uint32_t) override { ++done_recvs; }
  void on_put_done(uint64_t, bool ok) override {
    if (!ok) die("--trans: a send failed");
    ++done_sends;
  }
  void on_peer_error(int, const std::string& reason) override { die("--trans: " + reason); }
  void progress_until(const uint64_t& counter, uint64_t at_least) {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    for (unsigned spins = 0; counter < at_least; ++spins) {
      tr->progress(*this);
      if ((spins & 1023) == 0 && Clock::now() > deadline) die("--trans: no progress in 60 s");
    }
  }
};

// ---- bursts ----------------------------------------------------------------------------

enum Kind { kTpcomm, kRaw, kRawOne, kRawCfg, kRawSplit, kRawAm, kTrans };
const char* kNames[] = {"tpcomm", "raw", "raw1", "rawcfg", "rawsplit", "rawam", "trans"};

struct Rank {
  int rank;
  const Args& a;
  ProcessGroup* pg;
  Raw& raw;
  Raw* raw_cfg;  // --raw-cfg, --raw-am: a second context with tpcomm's UCX parameters
  const BenchBuffer& sbuf;
  const std::vector<std::unique_ptr<BenchBuffer>>& rbufs;         // rank 1: W buffers
  Trans* trans;                                                   // --trans
  std::vector<std::unique_ptr<transport::MemoryRegion>> regions;  // --trans: sbuf / rbufs

  void* recv_buf(Kind k, int i) const {
    return rbufs[k == kRawOne ? 0 : static_cast<size_t>(i % a.window)]->data();
  }

  // `count` raw UCP posts (post(i) gives message i's request) through a window of a.window,
  // between two line-ups; the time from the first line-up to the last completion.
  template <class Post>
  std::chrono::duration<double> raw_window(const Raw& raw, int count, Post&& post) const {
    raw.line_up(rank);
    std::vector<void*> reqs(static_cast<size_t>(a.window), nullptr);
    auto t0 = Clock::now();
    for (int i = 0; i < count; ++i) {
      void*& r = reqs[static_cast<size_t>(i % a.window)];
      raw.wait(r);
      r = post(i);
      if (UCS_PTR_IS_ERR(r)) die("raw UCX post failed", UCS_PTR_STATUS(r));
    }
    for (void*& r : reqs) raw.wait(r);
    std::chrono::duration<double> sec = Clock::now() - t0;
    raw.line_up(rank);
    return sec;
  }

  // One burst; rank 0 returns GB/s (its time from the line-up to its last completion).
  double burst(Kind k, int count) const {
    const int peer = 1 - rank;
    int64_t ack = 0;
    const size_t n = a.size;
    std::chrono::duration<double> sec{};
    if (k == kTpcomm) {
      pg->send(Tensor::of(&ack, 1), peer, 1);
      pg->recv(Tensor::of(&ack, 1), peer, 1);
      std::vector<std::shared_ptr<Work>> w(static_cast<size_t>(a.window));
      auto t0 = Clock::now();
      for (int i = 0; i < count; ++i) {
        auto& slot = w[static_cast<size_t>(i % a.window)];
        if (slot && a.poll)
          while (!slot->is_completed()) {
          }
        if (slot) slot->wait();
        Tensor t = Tensor::raw(rank == 0 ? sbuf.data() : recv_buf(k, i), static_cast<int64_t>(n),
                               DType::UInt8);
        slot = rank == 0 ? pg->isend(t, peer, 2) : pg->irecv(t, peer, 2);
      }
      for (auto& slot : w)
        if (slot) slot->wait();
      sec = Clock::now() - t0;
      pg->send(Tensor::of(&ack, 1), peer, 3);
      pg->recv(Tensor::of(&ack, 1), peer, 3);
    } else if (k == kTrans) {
      // Line-up through the raw context (the transport's own messages are the transfers).
      raw.line_up(rank);
      Trans& t = *trans;
      uint64_t base_s = t.done_sends, base_r = t.done_recvs;
      auto t0 = Clock::now();
      uint64_t next_id = 1;
      for (int i = 0; i < count; ++i) {
        if (rank == 0) {
          if (i >= a.window)
            t.progress_until(t.done_sends, base_s + static_cast<uint64_t>(i - a.window + 1));
          uint64_t id = next_id++;
          iovec msg{&id, sizeof id};
          for (;;) {
            auto ps = t.ep->send_tagged_with_message({&msg, 1}, *regions[0], 0, n, id, id);
            if (ps == transport::PostStatus::Ok) break;
            if (ps == transport::PostStatus::PeerFailed) die("--trans: peer failed");
            t.tr->progress(t);
          }
        } else {
          if (i >= a.window)
            t.progress_until(t.done_recvs, base_r + static_cast<uint64_t>(i - a.window + 1));
          while (t.arrived_ids.empty()) t.tr->progress(t);
          uint64_t id = t.arrived_ids.front();
          t.arrived_ids.erase(t.arrived_ids.begin());
          t.tr->recv_tagged(t.peer, id, *regions[static_cast<size_t>(i % a.window)], 0, n,
                            static_cast<uint32_t>(i));
        }
      }
      if (rank == 0)
        t.progress_until(t.done_sends, base_s + static_cast<uint64_t>(count));
      else
        t.progress_until(t.done_recvs, base_r + static_cast<uint64_t>(count));
      sec = Clock::now() - t0;
      raw.line_up(rank);
    } else if (k == kRawAm) {
      Raw& raw = *raw_cfg;
      sec = raw_window(raw, count, [&](int i) {
        return rank == 0 ? raw.am_send(sbuf.data(), n) : raw.am_take(recv_buf(k, i), n);
      });
    } else if (k == kRawSplit) {
      // Each message in a.split parts, part j on endpoint j (tag 100 + j), into consecutive
      // parts of the receive buffer.
      const int parts = a.split;
      raw.line_up(rank);
      std::vector<void*> reqs(static_cast<size_t>(a.window * parts), nullptr);
      auto t0 = Clock::now();
      const size_t piece = (n + static_cast<size_t>(parts) - 1) / static_cast<size_t>(parts);
      for (int i = 0; i < count; ++i) {
        const size_t slot = static_cast<size_t>(i % a.window) * static_cast<size_t>(parts);
        for (int j = 0; j < parts; ++j) raw.wait(reqs[slot + static_cast<size_t>(j)]);
        for (int j = 0; j < parts; ++j) {
          const size_t off = piece * static_cast<size_t>(j);
          const size_t len = off >= n ? 0 : std::min(piece, n - off);
          void*& r = reqs[slot + static_cast<size_t>(j)];
          r = rank == 0 ? raw.send_on(j, reinterpret_cast<const char*>(sbuf.data()) + off, len,
                                      100 + static_cast<ucp_tag_t>(j))
                        : raw.recv(static_cast<char*>(recv_buf(k, i)) + off, len,
                                   100 + static_cast<ucp_tag_t>(j));
          if (UCS_PTR_IS_ERR(r)) die("raw UCX post failed", UCS_PTR_STATUS(r));
        }
      }
      for (void*& r : reqs) raw.wait(r);
      sec = Clock::now() - t0;
      raw.line_up(rank);
    } else {
      const Raw& raw = k == kRawCfg ? *raw_cfg : this->raw;
      sec = raw_window(raw, count, [&](int i) {
        return rank == 0 ? raw.send(sbuf.data(), n, 1) : raw.recv(recv_buf(k, i), n, 1);
      });
    }
    return static_cast<double>(n) * count / sec.count() / 1e9;
  }
};

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = q * static_cast<double>(v.size() - 1);
  auto lo = static_cast<size_t>(pos);
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

int run_rank(int rank, int fd, const std::string& dir, const Args& a) {
  if (a.pin) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(rank % static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)), &set);
    sched_setaffinity(0, sizeof set, &set);
  }
  auto store = std::make_shared<FileStore>(dir + "/store", -1);
  InitOptions o;
  o.backend = "ucx";
  std::shared_ptr<ProcessGroup> pg;
  if (!a.no_tpcomm) pg = ProcessGroup::create(store, rank, 2, o);
  Raw raw(fd, false);
  std::unique_ptr<Raw> raw_cfg;
  if (a.raw_cfg || a.raw_am) raw_cfg = std::make_unique<Raw>(fd, true, a.cfg);
  if (a.raw_am) raw_cfg->enable_am();
  auto sbuf = std::make_unique<BenchBuffer>(a.size, false);
  std::memset(sbuf->data(), 1, a.size);
  std::vector<std::unique_ptr<BenchBuffer>> rbufs;
  if (rank == 1) {
    if (a.alias) {
      rbufs = BenchBuffer::views_of_one(a.size, a.window);
    } else {
      for (int i = 0; i < a.window; ++i)
        rbufs.push_back(std::make_unique<BenchBuffer>(a.size, false));
    }
    for (auto& b : rbufs) std::memset(b->data(), 2, a.size);
  }
  std::unique_ptr<Trans> trans;
  if (a.trans) trans = std::make_unique<Trans>(rank, fd);
  Rank r{rank, a, pg.get(), raw, raw_cfg.get(), *sbuf, rbufs, trans.get(), {}};
  if (trans) {
    if (rank == 0) {
      r.regions.push_back(trans->tr->register_memory(sbuf->data(), a.size, Device::cpu()));
    } else {
      for (auto& b : rbufs)
        r.regions.push_back(trans->tr->register_memory(b->data(), a.size, Device::cpu()));
    }
  }
  std::vector<Kind> kinds{kRaw};
  if (pg) kinds.insert(kinds.begin(), kTpcomm);
  if (a.raw_one) kinds.push_back(kRawOne);
  if (a.raw_cfg) kinds.push_back(kRawCfg);
  if (a.raw_am) kinds.push_back(kRawAm);
  if (a.trans) kinds.push_back(kTrans);
  if (a.split > 1) {
    raw.add_endpoints(a.split);
    kinds.push_back(kRawSplit);
  }
  const int count = a.count > 0
                        ? a.count
                        : static_cast<int>(std::max<size_t>(2 * a.window, (256ull << 20) / a.size));
  for (Kind k : kinds) r.burst(k, std::max(a.window, count / 4));  // warm-up (tcp windows grow)
  std::vector<std::vector<double>> bw(kinds.size());
  std::vector<std::vector<double>> ratio(kinds.size());
  FILE* tl = nullptr;
  if (!a.timeline.empty()) {
    tl = std::fopen((a.timeline + "." + std::to_string(rank)).c_str(), "w");
    if (!tl) die("cannot write " + a.timeline);
  }
  if (rank == 0) {
    std::printf("round");
    for (Kind k : kinds) std::printf(" %8s", kNames[k]);
    for (size_t j = 1; j < kinds.size(); ++j)
      std::printf("  %s/%s", kNames[kinds[0]], kNames[kinds[j]]);
    std::printf("   (GB/s)\n");
  }
  for (int round = 0; round < a.rounds; ++round) {
    std::vector<double> got(kinds.size());
    for (size_t j = 0; j < kinds.size(); ++j) {
      size_t idx = (j + static_cast<size_t>(round)) % kinds.size();
      int64_t t0 = mono_ns();
      got[idx] = r.burst(kinds[idx], count);
      if (tl)
        std::fprintf(tl, "%lld %lld %s\n", static_cast<long long>(t0),
                     static_cast<long long>(mono_ns()), kNames[kinds[idx]]);
    }
    if (rank != 0) continue;
    std::printf("%5d", round + 1);
    for (size_t j = 0; j < kinds.size(); ++j) {
      bw[j].push_back(got[j]);
      std::printf(" %8.2f", got[j]);
    }
    for (size_t j = 1; j < kinds.size(); ++j) {
      ratio[j].push_back(got[0] / got[j]);
      std::printf("  %9.1f%%", 100 * got[0] / got[j]);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  if (tl) std::fclose(tl);
  if (rank == 0) {
    std::printf("size %zu window %d receive buffers %s, %d rounds of %d messages\n", a.size,
                a.window, a.alias ? "aliased (views of one memory file)" : "distinct", a.rounds,
                count);
    for (size_t j = 0; j < kinds.size(); ++j)
      std::printf("%-7s median %.2f GB/s (quartiles %.2f .. %.2f)\n", kNames[kinds[j]],
                  quantile(bw[j], 0.5), quantile(bw[j], 0.25), quantile(bw[j], 0.75));
    for (size_t j = 1; j < kinds.size(); ++j)
      std::printf("%s/%s per round: median %.1f%% (quartiles %.1f%% .. %.1f%%)\n", kNames[kinds[0]],
                  kNames[kinds[j]], 100 * quantile(ratio[j], 0.5), 100 * quantile(ratio[j], 0.25),
                  100 * quantile(ratio[j], 0.75));
  }
  if (pg) pg->destroy();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ucx_bench::g_prog = "ucx_ab";
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) die("missing value after " + s);
      return argv[++i];
    };
    if (s == "--size")
      a.size = std::max<size_t>(1, parse_size(next()));
    else if (s == "--window")
      a.window = std::max(1, std::atoi(next()));
    else if (s == "--rounds")
      a.rounds = std::max(1, std::atoi(next()));
    else if (s == "--count")
      a.count = std::max(1, std::atoi(next()));
    else if (s == "--alias")
      a.alias = true;
    else if (s == "--raw-one")
      a.raw_one = true;
    else if (s == "--pin")
      a.pin = true;
    else if (s == "--no-tpcomm")
      a.no_tpcomm = true;
    else if (s == "--raw-cfg")
      a.raw_cfg = true;
    else if (s == "--cfg")
      a.cfg.push_back(next());
    else if (s == "--raw-am")
      a.raw_am = true;
    else if (s == "--trans")
      a.trans = true;
    else if (s == "--split")
      a.split = std::max(1, std::atoi(next()));
    else if (s == "--timeline")
      a.timeline = next();
    else if (s == "--poll")
      a.poll = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--size N] [--window W] [--rounds R] [--count C] [--alias] "
                   "[--raw-one] [--raw-cfg [--cfg NAME=VALUE]...] [--split K] [--raw-am] "
                   "[--trans] [--no-tpcomm] [--poll] [--pin] [--timeline FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  char tmpl[] = "/tmp/tpcomm-ucx-ab-XXXXXX";
  if (!mkdtemp(tmpl)) die("mkdtemp failed");
  const std::string dir = tmpl;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) die("socketpair failed");
  std::fflush(stdout);
  pid_t pids[2];
  for (int r = 0; r < 2; ++r) {
    pids[r] = fork();
    if (pids[r] < 0) die("fork failed");
    if (pids[r] == 0) {
      ::close(sv[1 - r]);
      int rc = 1;
      try {
        rc = run_rank(r, sv[r], dir, a);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      _exit(rc);
    }
  }
  ::close(sv[0]);
  ::close(sv[1]);
  int rc = 0;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  unlink((dir + "/store").c_str());
  rmdir(dir.c_str());
  return rc;
}
