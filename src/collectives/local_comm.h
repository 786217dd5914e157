// LocalWorld: an in-process group whose ranks are threads exchanging through mailboxes keyed
// by (source, destination, tag). It implements CollComm with the strict semantics of the
// real engine (a send completes only when a matching receive has taken its data; sizes must
// agree), so that collective algorithms are tested for deadlocks and buffer hazards without
// a network. Used by the collective tests and by `tpbench --threads N`.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "collectives/comm.h"

namespace tpcomm::coll {

class LocalWorld {
 public:
  struct Options {
    /// Budget of each wait; a wait that runs out throws TimeoutError naming what it waited
    /// for, and aborts the world.
    std::chrono::milliseconds timeout{60000};
    /// What hints() reports (the cost model's inputs).
    TransportHints hints;
  };

  explicit LocalWorld(int size);
  LocalWorld(int size, const Options& options);
  ~LocalWorld();
  LocalWorld(const LocalWorld&) = delete;
  LocalWorld& operator=(const LocalWorld&) = delete;

  int size() const;
  /// The communicator of `rank` (use it from one thread at a time).
  CollComm& comm(int rank);

  /// Runs fn(comm(r)) on one thread per rank and joins them. When a rank throws, the world
  /// is aborted (pending and later operations of the other ranks fail with AbortedError), and
  /// the first error that is not such an AbortedError is rethrown. The world is then reset
  /// so that it can run again.
  void run(const std::function<void(CollComm&)>& fn);

  /// Fails every pending and later operation with AbortedError carrying `reason`.
  void abort(const std::string& reason);
  /// Clears the aborted state and drops unmatched operations.
  void reset();
  /// Operations posted but not matched yet (a clean collective leaves none).
  size_t unmatched() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpcomm::coll
