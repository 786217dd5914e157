// Running a ProcessGroup's collectives: state, ordering, async Work, failure handling.
#include "pg/coll_run.h"

#include <immintrin.h>

#include <chrono>
#include <sstream>

#include "core/config.h"
#include "core/log.h"
#include "tpcomm/error.hpp"

namespace tpcomm::detail {
namespace {

// The Work of a collective: completed by the collective thread (or at once when blocking).
class CollWork : public Work {
 public:
  // The description is built only for an error (no string work on the fast path).
  CollWork(const char* op, std::shared_ptr<GroupState> g) : op_(op), group_(std::move(g)) {}

  void finish(std::exception_ptr e) {
    std::lock_guard<std::mutex> lk(mu_);
    error_ = std::move(e);
    done_ = true;
    cv_.notify_all();
  }

  bool wait(std::optional<std::chrono::milliseconds> timeout) override {
    std::unique_lock<std::mutex> lk(mu_);
    // Without a timeout the collective's own deadline bounds the wait.
    if (!timeout) {
      cv_.wait(lk, [&] { return done_; });
    } else if (!cv_.wait_for(lk, *timeout, [&] { return done_; })) {
      throw TimeoutError(std::string(op_) + " on group '" + group_->info.name +
                         "': Work::wait gave up after " + std::to_string(timeout->count()) +
                         " ms; the collective is still queued or running on the group's "
                         "collective thread (it ends at its own deadline)");
    }
    if (error_) std::rethrow_exception(error_);
    return true;
  }
  bool is_completed() override {
    std::lock_guard<std::mutex> lk(mu_);
    return done_;
  }
  bool is_success() override {
    std::lock_guard<std::mutex> lk(mu_);
    return done_ && !error_;
  }
  std::exception_ptr exception() override {
    std::lock_guard<std::mutex> lk(mu_);
    return done_ ? error_ : nullptr;
  }
  int source_rank() override { return -1; }

 private:
  const char* op_;
  std::shared_ptr<GroupState> group_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

void worker_main(std::shared_ptr<CollQueue> q) {
  std::unique_lock<std::mutex> lk(q->mu);
  for (;;) {
    q->cv.wait(lk, [&] { return q->stop || !q->tasks.empty(); });
    if (q->tasks.empty()) return;  // stopped and drained
    std::function<void()> task = std::move(q->tasks.front());
    q->tasks.pop_front();
    q->busy = true;
    lk.unlock();
    task();
    task = nullptr;  // may drop the last reference to the group
    lk.lock();
    q->busy = false;
    q->cv.notify_all();
  }
}

// Latency/bandwidth of the group's links, the same on every member (the cost model must pick
// the same algorithm everywhere): the transport to the next member when all members share
// this host, else the transport to the first member on another host.
void compute_hints(GroupState& g, CollState& cs) {
  auto& engine = *g.world->engine;
  const int n = g.size();
  std::string mine = engine.peer_host(g.world->rank);
  int other_host = -1;
  for (int m : g.info.ranks)
    if (m != g.world->rank && other_host < 0 && engine.peer_host(m) != mine) other_host = m;
  cs.one_host = other_host < 0;
  if (n > 1) {
    int peer = cs.one_host ? g.info.ranks[(g.rank + 1) % n] : other_host;
    transport::Capabilities caps = engine.link_capabilities(g.info.backend, peer);
    cs.hints.name = engine.transport_for(g.info.backend, peer);
    cs.hints.latency_us = caps.latency_us;
    cs.hints.bandwidth_gbps = caps.bandwidth_gbps;
  } else {
    cs.hints.name = "self";
  }
  cs.hints_ready = true;
}

// The intra-host fast path: every member makes it at the same call (the first collective),
// when all members share this host and the group's links are shm (so not for backend tcp or
// TPCOMM_TRANSPORT=tcp, nor with TPCOMM_SHM_DISABLE). HostColl reads TPCOMM_ALGO here: a rule
// forcing another algorithm for an operation keeps that operation on message passing.
void make_host_coll(GroupState& g, CollState& cs, Deadline dl) {
  if (!cs.one_host || cs.hints.name != "shm" || g.size() < 2) return;
  cs.host_store = std::make_shared<PrefixStore>("shm_coll", g.store);
  // Every member published its liveness record before its engine ran.
  g.world->engine->resolve_peers();
  try {
    cs.host = coll::shm::HostColl::create(*cs.host_store, g.rank, g.size(), dl,
                                          {g.world->engine->watch(), g.info.ranks});
  } catch (const PeerError&) {
    throw;  // a member is lost: message passing would fail on it too
  } catch (const std::exception& e) {
    TPLOG(INFO, COLL) << "group '" << g.info.name << "': no shared-memory fast path (" << e.what()
                      << "); collectives use message passing";
  }
}

std::string message_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown error";
  }
}

// What a call that throws leaves behind (called in its catch block): the flight recorder's
// verdict, the group marked unusable when messages may still be in flight, and a lost member
// told to the others.
void on_call_failure(GroupState& g, CollState& cs, EngineComm& comm, bool clean_failure,
                     uint64_t seq) {
  comm.on_failure(std::current_exception());
  if (comm.posted() > 0 && !clean_failure) {
    cs.broken = comm.where() + " failed part-way (" + message_of(std::current_exception()) + ")";
    TPLOG(WARN, COLL) << "group '" << g.info.name << "': " << cs.broken;
  }
  try {
    std::rethrow_exception(std::current_exception());
  } catch (const PeerError& e) {
    // A member is lost: tell the others (those with no link to it would otherwise wait
    // for their deadline). Best effort.
    // The first report stays (the others' come from members that failed on the first's
    // exit). A server that does not answer within the heartbeat timeout is not waited for.
    try {
      auto bound = config::get_duration("TPCOMM_HEARTBEAT_TIMEOUT");
      if (bound.count() <= 0) bound = std::chrono::seconds(10);
      const std::string key = lost_key(seq);
      if (!g.store->check_within({key}, bound))
        g.store->set(key, "rank " + std::to_string(g.rank) + " reported: " + e.what());
    } catch (const std::exception&) {
    }
  } catch (...) {
  }
}

// The direct-read collectives' errors name the call as the group knows it (operation,
// sequence number, group), as the message-passing path's do.
std::exception_ptr located(const EngineComm& comm, std::exception_ptr e) {
  auto prefixed = [&](const std::exception& x) {
    return std::string(x.what()).starts_with("shm_direct") ? comm.where() + ": " + x.what() : "";
  };
  // A member that failed first (and exited, which is how this rank may have learnt of a
  // loss) said why in the group's store: the root cause, when it is another member.
  auto first_loss = [&] {
    std::string n = comm.notice();
    return n.empty() ? n : ". First loss: " + n;
  };
  try {
    std::rethrow_exception(e);
  } catch (const PeerError& x) {
    if (std::string m = prefixed(x); !m.empty())
      return std::make_exception_ptr(PeerError(m + first_loss()));
  } catch (const TimeoutError& x) {
    if (std::string m = prefixed(x); !m.empty()) return std::make_exception_ptr(TimeoutError(m));
  } catch (...) {
  }
  return e;
}

// Per call: the sequence number, the operation's code and the deadline (under the run lock).
void next_call(GroupState& g, CollState& cs, const char* op, const CollectiveOptions& o) {
  CollCall& call = cs.call;
  call.seq = cs.seq++;
  if (call.op != op) {  // a string literal: the same pointer on every call of an operation
    call.op = op;
    call.opcode = op_code(op);
  }
  auto timeout = o.timeout.count() > 0 ? o.timeout : g.timeout;
  call.deadline = Deadline::after_coarse(timeout);
  call.timeout = timeout;
}

// Runs one collective now (caller holds no lock). `checked`: the caller has just checked
// that the group is usable, with nothing in between (a blocking call that waited for no
// queued call).
void execute(GroupState& g, CollState& cs, const char* op, const CollectiveOptions& o, BodyRef body,
             bool checked = false) {
  std::lock_guard<RunLock> run(cs.run_mu);
  if (!checked) g.check_usable(op);
  if (!cs.broken.empty())
    throw AbortedError(std::string(op) + ": the collectives of group '" + g.info.name +
                       "' are unusable: " + cs.broken +
                       ". Messages of that call may still be in flight; destroy the group and "
                       "create a new one");
  CollCall& call = cs.call;
  if (!cs.hints_ready) {
    compute_hints(g, cs);
    make_host_coll(g, cs, Deadline::after(o.timeout.count() > 0 ? o.timeout : g.timeout));
    call.engine = g.world->engine;
    call.channel = &cs.channel;
    call.group_name = g.info.name;
    call.rank = g.rank;
    call.store = g.store;
    call.hints = cs.hints;
    call.ring = cs.ring.get();
    call.check_signature = cs.check_signature;
  }
  // Per call: no allocation, no reference count (the latency of small collectives).
  next_call(g, cs, op, o);
  const uint64_t seq = call.seq;
  EngineComm comm(call);
  CollContext ctx{comm, cs.host.get()};
  const char* algo = nullptr;
  try {
    algo = body(ctx);
  } catch (...) {
    std::exception_ptr e = located(comm, std::current_exception());
    try {
      std::rethrow_exception(e);
    } catch (...) {
      on_call_failure(g, cs, comm, ctx.clean_failure, seq);
      throw;
    }
  }
  comm.record_done(algo);
  cs.last_algorithm.store(algo, std::memory_order_release);
}

}  // namespace

// The Work of a blocking collective that succeeded: immutable, shared by all such calls.
class DoneWork : public Work {
 public:
  bool wait(std::optional<std::chrono::milliseconds>) override { return true; }
  bool is_completed() override { return true; }
  bool is_success() override { return true; }
  std::exception_ptr exception() override { return nullptr; }
  int source_rank() override { return -1; }
};

// Without a control block (the aliasing constructor over an empty owner): a copy, as every
// blocking call returns, and its destruction cost no atomic reference count. The object is
// never destroyed, so a Work kept past the end of main stays valid.
const std::shared_ptr<Work>& done_work() {
  static DoneWork* const w = new DoneWork();
  static const std::shared_ptr<Work> p(std::shared_ptr<Work>(), w);
  return p;
}

namespace {

// The caller has checked that `g` is usable.
void blocking(GroupState& g, CollState& cs, const char* op, const CollectiveOptions& options,
              BodyRef body) {
  if (cs.async_used.load(std::memory_order_acquire)) {
    // Calls are ordered: earlier async collectives of this group finish first.
    std::shared_ptr<CollQueue> q = cs.queue;
    std::unique_lock<std::mutex> lk(q->mu);
    q->cv.wait(lk, [&] { return q->tasks.empty() && !q->busy; });
    lk.unlock();
    execute(g, cs, op, options, body);  // checks again: the group may have gone meanwhile
    return;
  }
  execute(g, cs, op, options, body, /*checked=*/true);
}

}  // namespace

void RunLock::lock_slow() {
  for (int i = 0;; ++i) {
    if (!held_.load(std::memory_order_relaxed) && !held_.exchange(true, std::memory_order_acquire))
      return;
    if (i < 64) {
      _mm_pause();
    } else if (i < 1024) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

CollState::~CollState() {
  {
    std::lock_guard<std::mutex> lk(queue->mu);
    queue->stop = true;
    queue->cv.notify_all();
  }
  if (!worker.joinable()) return;
  if (worker.get_id() == std::this_thread::get_id())
    worker.detach();  // the last task dropped the group; the thread holds the queue alive
  else
    worker.join();
}

CollState& coll_state(GroupState& g) {
  if (CollState* p = g.coll_ptr.load(std::memory_order_acquire)) return *p;
  std::lock_guard<std::mutex> lk(g.coll_mu);
  if (!g.coll) {
    auto cs = std::make_shared<CollState>();
    cs->channel = g.info;
    // A private engine group: collective messages never meet point-to-point receives.
    cs->channel.id = fnv1a(std::to_string(g.info.id) + "/collectives");
    cs->channel.name = g.info.name + "/coll";
    g.world->engine->add_group(cs->channel);
    cs->ring = fr::make_ring({g.info.id, g.info.name, g.world->rank, g.world->world_size, g.rank,
                              g.info.ranks, g.world.get()});
    cs->check_signature = config::get_bool("TPCOMM_CHECK_SIGNATURE");
    g.coll = cs;
    g.coll_ptr.store(cs.get(), std::memory_order_release);
  }
  return *g.coll;
}

void run_blocking(GroupState& g, const char* op, const CollectiveOptions& options, BodyRef body) {
  g.check_usable(op);
  blocking(g, coll_state(g), op, options, body);
}

const char* run_tiny_all_reduce(GroupState& g, const char* op, const Tensor& in, const Tensor& out,
                                ReduceOp redop, const CollectiveOptions& o) {
  // The caller's arguments first (nothing shared is read for a call that does not qualify).
  if (o.async_op || !o.algorithm.empty() || in.data == nullptr || out.data == nullptr ||
      out.numel != in.numel || out.dtype != in.dtype || in.device.type != DeviceType::CPU ||
      out.device.type != DeviceType::CPU)
    return nullptr;
  CollState* cs = g.coll_ptr.load(std::memory_order_acquire);
  // Queued async calls, a destroyed group, a non-member: the general path (it waits, or
  // throws the error).
  if (cs == nullptr || cs->async_used.load(std::memory_order_acquire) || g.rank < 0 ||
      g.destroyed.load(std::memory_order_relaxed))
    return nullptr;
  cs->run_mu.lock();
  coll::shm::HostColl* host = cs->hints_ready ? cs->host.get() : nullptr;
  if (host == nullptr || !host->takes_tiny(in.dtype, in.numel, redop) || !cs->broken.empty() ||
      (g.world && g.world->destroyed)) {
    cs->run_mu.unlock();
    return nullptr;
  }
  std::lock_guard<RunLock> run(cs->run_mu, std::adopt_lock);
  next_call(g, *cs, op, o);
  EngineComm comm(cs->call);
  comm.sign(in.dtype, in.numel, -1, static_cast<int>(redop));
  try {
    host->all_reduce_tiny(in, out.data, redop, cs->call.deadline);
  } catch (...) {
    on_call_failure(g, *cs, comm, false, cs->call.seq);
    throw;
  }
  const char* algo = host->last_algo().name;
  comm.record_done(algo);
  cs->last_algorithm.store(algo, std::memory_order_release);
  return algo;
}

std::shared_ptr<Work> run_collective_now(GroupState& g, const char* op,
                                         const CollectiveOptions& options, BodyRef body) {
  run_blocking(g, op, options, body);
  return done_work();
}

std::shared_ptr<Work> run_collective_async(const std::shared_ptr<GroupState>& g, const char* op,
                                           const CollectiveOptions& options, CollBody body) {
  g->check_usable(op);
  CollState& cs = coll_state(*g);
  auto work = std::make_shared<CollWork>(op, g);
  std::shared_ptr<CollQueue> q = cs.queue;
  cs.async_used.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lk(q->mu);
  if (q->stop)
    throw AbortedError(std::string(op) + " on group '" + g->info.name +
                       "': the group's collective thread has stopped (group destroyed)");
  if (!cs.worker.joinable()) cs.worker = std::thread(worker_main, q);
  q->tasks.push_back([g, op, options, body = std::move(body), work] {
    try {
      execute(*g, coll_state(*g), op, options, BodyRef(body));
      work->finish(nullptr);
    } catch (...) {
      work->finish(std::current_exception());
    }
  });
  q->cv.notify_all();
  return work;
}

std::string last_algorithm(GroupState& g) {
  const char* a = coll_state(g).last_algorithm.load(std::memory_order_acquire);
  return a ? a : "";
}

void shutdown_collectives(GroupState& g) {
  std::shared_ptr<CollState> cs;
  {
    std::lock_guard<std::mutex> lk(g.coll_mu);
    cs = g.coll;
  }
  if (!cs) return;
  if (!g.is_world && !g.world->destroyed) g.world->engine->remove_group(cs->channel.id);
  std::lock_guard<std::mutex> lk(cs->queue->mu);
  cs->queue->stop = true;
  cs->queue->cv.notify_all();
}

}  // namespace tpcomm::detail
