// How a ProcessGroup runs its collectives: one at a time per group, in call order, each over
// a fresh EngineComm (engine_comm.h) with the next sequence number and its own deadline.
// async_op calls run on the group's collective thread and complete a CollWork; blocking
// calls run on the caller's thread once the earlier async calls have finished.
#pragma once

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
  std::mutex run_mu;       ///< one collective at a time
  uint64_t seq = 0;        ///< collectives started on this group
  bool hints_ready = false;
  coll::TransportHints hints;
  bool one_host = false;  ///< every member runs on this host
  /// Direct-read collectives when every member is on this host and the links are shm; made
  /// by every member at the group's first collective (null when not eligible or it failed).
  std::unique_ptr<coll::shm::HostColl> host;
  std::shared_ptr<Store> host_store;
  std::string broken;  ///< why the group's collectives are unusable (a call failed mid-way)
  std::mutex info_mu;
  std::string last_algorithm;  ///< of the last collective that completed here
  std::shared_ptr<CollQueue> queue = std::make_shared<CollQueue>();
  std::thread worker;
  std::shared_ptr<fr::Ring> ring;  ///< the flight recorder (pg/flight_recorder.h); null: off
  bool check_signature = true;     ///< TPCOMM_CHECK_SIGNATURE

  ~CollState();
};

/// The group's collective state (made on first use).
CollState& coll_state(GroupState& g);

/// Runs `body` as collective `op` of group `g` (blocking or async per `options`).
std::shared_ptr<Work> run_collective(const std::shared_ptr<GroupState>& g, const char* op,
                                     const CollectiveOptions& options, CollBody body);

/// The blocking form on a group the caller keeps alive (tpbench's binding); rethrows.
void run_blocking(GroupState& g, const char* op, const CollectiveOptions& options,
                  const CollBody& body);

/// The algorithm the last completed collective of `g` ran ("" before any): for tests and
/// tpbench.
std::string last_algorithm(GroupState& g);

/// Called by ProcessGroup::destroy: fails the group's pending collectives and stops its
/// thread.
void shutdown_collectives(GroupState& g);

}  // namespace tpcomm::detail
