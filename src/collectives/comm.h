// The point-to-point interface every collective algorithm is written against. A CollComm is
// one rank's view of a group for the duration of collective calls: nonblocking tagged sends
// and receives between group ranks, completion by wait/test/wait_any, and the deadline of
// the collective in progress. The process group binds it to the p2p engine (adding a
// per-collective sequence number to the tags); tests and `tpbench --threads` bind it to
// LocalWorld (threads exchanging through mailboxes, local_comm.h).
//
// Contract the algorithms rely on (and every implementation must honour):
// - Messages between one (source, destination, tag) are matched in posting order (MPI's
//   non-overtaking rule); tags only need to be unique within one collective call.
// - A send may complete only once the receiver has posted the matching receive (rendezvous),
//   so algorithms post receives before they block on sends.
// - The sizes of a matched send and receive are equal; a disagreement fails both with a
//   MismatchError.
// - A buffer belongs to the implementation from isend/irecv until the request completes.
//   Destroying a pending Request cancels it: once the destructor returns, the buffer is not
//   touched again (so an algorithm that throws half-way frees its scratch memory safely).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "core/deadline.h"

namespace tpcomm::coll {

/// What an implementation keeps about one posted operation. Its destructor cancels the
/// operation if it is still pending.
class RequestState {
 public:
  virtual ~RequestState() = default;
};

/// Handle of one posted send or receive (move-only). Empty once completed by wait/test.
class Request {
 public:
  Request() = default;
  explicit Request(std::unique_ptr<RequestState> state) : state_(std::move(state)) {}
  Request(Request&&) noexcept = default;
  Request& operator=(Request&&) noexcept = default;

  /// True when nothing is pending behind this handle.
  bool empty() const { return state_ == nullptr; }
  RequestState* state() const { return state_.get(); }
  /// Drops the operation (cancelling it when still pending).
  void reset() { state_.reset(); }

 private:
  std::unique_ptr<RequestState> state_;
};

/// Latency and bandwidth of the links a collective runs over: the inputs of the cost model
/// (select.h). Same meaning as transport::Capabilities' hints.
struct TransportHints {
  std::string name = "local";
  double latency_us = 1.0;       ///< one-way small-message latency
  double bandwidth_gbps = 10.0;  ///< peak point-to-point bandwidth, GB/s (1e9 bytes/s)
  double reduce_gbps = 8.0;      ///< host reduction throughput, GB/s of input read
};

/// One rank's point-to-point access to a group, as the algorithms see it.
class CollComm {
 public:
  virtual ~CollComm() = default;

  /// This rank in the group, and the group's size.
  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// Posts a send of `bytes` bytes (0 allowed, `buf` may then be null) to group rank `peer`.
  virtual Request isend(const void* buf, size_t bytes, int peer, int tag) = 0;
  /// Posts a receive of exactly `bytes` bytes from group rank `peer` into `buf`.
  virtual Request irecv(void* buf, size_t bytes, int peer, int tag) = 0;

  /// Blocks until `req` completes (an empty request returns at once), then empties it.
  /// Rethrows the operation's error; throws TimeoutError at deadline() naming the peer and
  /// tag it waited for.
  virtual void wait(Request& req) = 0;
  /// Non-blocking: true (and empties `req`) when complete; an empty request is complete.
  /// Rethrows the operation's error.
  virtual bool test(Request& req) = 0;
  /// Waits for every request, in order.
  virtual void wait_all(std::span<Request> reqs);
  /// Blocks until one of the non-empty requests completes; empties it and returns its
  /// index. Returns -1 at once when all are empty. The default polls test() with back-off.
  virtual int wait_any(std::span<Request* const> reqs);

  /// Deadline of the collective in progress: every wait gives up at it.
  virtual Deadline deadline() const = 0;

  /// Link latency and bandwidth for the cost model.
  virtual TransportHints hints() const { return {}; }
};

}  // namespace tpcomm::coll
