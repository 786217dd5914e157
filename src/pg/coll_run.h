// How a ProcessGroup runs its collectives: one at a time per group, in call order, each over
// a fresh EngineComm (engine_comm.h) with the next sequence number and its own deadline.
// async_op calls run on the group's collective thread and complete a CollWork; blocking
// calls run on the caller's thread once the earlier async calls have finished.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "collectives/comm.h"
#include "collectives/shm/host_coll.h"
#include "pg/engine_comm.h"
#include "pg/flight_recorder.h"
#include "pg/group_state.h"
#include "tpcomm/process_group.hpp"

namespace tpcomm::detail {

/// What one collective's body gets: the algorithms' communicator and, when the group is
/// eligible, the intra-host fast path.
struct CollContext {
  EngineComm& comm;
  /// The intra-host fast path (shm_direct), or null when the group has none.
  coll::shm::HostColl* host = nullptr;
  /// Set by a body that found the arguments inconsistent across ranks after a complete,
  /// clean exchange (nothing left in flight): the group stays usable after its error.
  bool clean_failure = false;
};

/// One collective: runs the operation and returns the name of the algorithm that ran.
using CollBody = std::function<const char*(CollContext&)>;

/// A body by reference, for calls that run it before returning (no allocation, no copy).
class BodyRef {
 public:
  template <class F>
  BodyRef(const F& f)  // NOLINT: implicit, like std::function_ref
      : obj_(&f), call_([](const void* o, CollContext& c) -> const char* {
          return (*static_cast<const F*>(o))(c);
        }) {}
  const char* operator()(CollContext& c) const { return call_(obj_, c); }

 private:
  const void* obj_;
  const char* (*call_)(const void*, CollContext&);
};

/// One collective at a time per group. Uncontended, taking it costs one atomic exchange and
/// releasing it a plain store (a std::mutex costs a locked instruction for each, on the
/// path of every small collective). Contention is rare (threads calling collectives of one
/// group at once, or a blocking call racing the collective thread): a waiter spins briefly,
/// then yields, then sleeps in 50 us steps.
class RunLock {
 public:
  void lock() {
    if (!held_.exchange(true, std::memory_order_acquire)) return;
    lock_slow();
  }
  void unlock() { held_.store(false, std::memory_order_release); }

 private:
  void lock_slow();
  std::atomic<bool> held_{false};
};

/// The group's collective thread and queue (shared with the thread, which may outlive a
/// group destroyed from inside a task).
struct CollQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  bool busy = false;  ///< a task is running
  bool stop = false;
};

/// Per-group collective state, made on the group's first collective (coll_state()).
struct CollState {
  p2p::GroupInfo channel;  ///< the collectives' engine group (private tag space)
  RunLock run_mu;          ///< one collective at a time
  uint64_t seq = 0;        ///< collectives started on this group
  bool hints_ready = false;
  coll::TransportHints hints;
  bool one_host = false;  ///< every member runs on this host
  /// Direct-read collectives when every member is on this host and the links are shm; made
  /// by every member at the group's first collective (null when not eligible or it failed).
  std::unique_ptr<coll::shm::HostColl> host;
  std::shared_ptr<Store> host_store;
  std::string broken;  ///< why the group's collectives are unusable (a call failed mid-way)
  /// The algorithm of the last collective that completed here (catalogue names are static).
  std::atomic<const char*> last_algorithm{nullptr};
  /// The parts of every call's CollCall that stay (engine, store, hints, ...), set with the
  /// hints; each call fills in its sequence number, operation and deadline (under run_mu).
  CollCall call;
  /// Set once an async call was queued: blocking calls then wait for the queue first.
  std::atomic<bool> async_used{false};
  std::shared_ptr<CollQueue> queue = std::make_shared<CollQueue>();
  std::thread worker;
  std::shared_ptr<fr::Ring> ring;  ///< the flight recorder (pg/flight_recorder.h); null: off
  bool check_signature = true;     ///< TPCOMM_CHECK_SIGNATURE

  ~CollState();
};

/// The group's collective state (made on first use).
CollState& coll_state(GroupState& g);

/// Runs `body` now, on this thread, as collective `op` of `g` (after the group's earlier
/// async calls); returns a completed Work or rethrows.
std::shared_ptr<Work> run_collective_now(GroupState& g, const char* op,
                                         const CollectiveOptions& options, BodyRef body);
/// Queues `body` on the group's collective thread; returns its pending Work.
std::shared_ptr<Work> run_collective_async(const std::shared_ptr<GroupState>& g, const char* op,
                                           const CollectiveOptions& options, CollBody body);

/// Runs `body` as collective `op` of group `g` (blocking or async per `options`). A blocking
/// call neither copies nor allocates the body.
template <class F>
std::shared_ptr<Work> run_collective(const std::shared_ptr<GroupState>& g, const char* op,
                                     const CollectiveOptions& options, F&& body) {
  if (!options.async_op) return run_collective_now(*g, op, options, BodyRef(body));
  return run_collective_async(g, op, options, CollBody(std::forward<F>(body)));
}

/// The Work every successful blocking collective returns (completed; no reference count).
const std::shared_ptr<Work>& done_work();

/// The fast lane of the 8-byte all_reduce of a training loop: a blocking SUM of a few bytes of
/// float32, float64, int32 or int64 (HostColl::takes_tiny) with no algorithm named, on a group
/// whose intra-host fast path is up and that has no async call queued. Runs it as collective
/// `op` (a string literal, as run_blocking's) of `g` with the general path's bookkeeping
/// (sequence number, deadline, flight recorder, failure handling) but none of its layers, and
/// returns the algorithm's name; nullptr, having done nothing, for a call that does not
/// qualify (run it the general way, which also reports bad arguments).
const char* run_tiny_all_reduce(GroupState& g, const char* op, const Tensor& in, const Tensor& out,
                                ReduceOp redop, const CollectiveOptions& o);

/// The blocking form on a group the caller keeps alive (tpbench's binding); rethrows.
void run_blocking(GroupState& g, const char* op, const CollectiveOptions& options, BodyRef body);

/// The algorithm the last completed collective of `g` ran ("" before any): for tests and
/// tpbench.
std::string last_algorithm(GroupState& g);

/// Called by ProcessGroup::destroy: fails the group's pending collectives and stops its
/// thread.
void shutdown_collectives(GroupState& g);

}  // namespace tpcomm::detail
