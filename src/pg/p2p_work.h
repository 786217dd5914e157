// The Work of a point-to-point operation. It holds the engine's Op itself (the engine keeps
// the Work alive through an aliasing pointer to its Op while the operation is in flight). So
// that this never makes a cycle (engine -> pending op -> Work -> group -> engine), the Work
// refers to its group and engine weakly: a Work whose group and engine are gone was completed
// by the engine's shutdown (AbortedError).
//
// Works are recycled (p2p_work.cc): a small per-thread pool keeps a reference to each Work it
// made (its shared_ptr control block and weak references stay), and make() hands out again one
// that nobody else holds any more, so that an isend/irecv on the latency path allocates
// nothing, runs no deleter and touches no reference count of the group or the engine.
#pragma once

#include <memory>

#include "p2p/engine.h"
#include "pg/group_state.h"
#include "tpcomm/process_group.hpp"

namespace tpcomm::detail {

struct P2PWorkPool;  // p2p_work.cc

class P2PWork final : public Work {
 public:
  /// A new (or recycled) Work of `group` and its Op, sharing one reference count.
  struct Made {
    P2PWork* work;
    std::shared_ptr<p2p::Op> op;  ///< pass to Engine::post_send / post_recv
    /// The Work as the caller returns it (takes over op's reference; no count changes).
    std::shared_ptr<Work> release() { return std::shared_ptr<Work>(std::move(op), work); }
  };
  static Made make(const std::shared_ptr<GroupState>& group);

  bool wait(std::optional<std::chrono::milliseconds> timeout) override;
  /// wait() with the group's timeout for a caller that keeps `engine` (this Work's) alive
  /// itself, as ProcessGroup::send/recv do: no reference is taken on the engine.
  void wait_in(p2p::Engine& engine) { engine.wait(op_, timeout_); }
  bool is_completed() override;
  bool is_success() override;
  std::exception_ptr exception() override;
  int source_rank() override;

  const p2p::Op& op() const { return op_; }

 private:
  /// make() when no pooled Work is free: a new one, pooled when there is room.
  [[gnu::noinline]] static Made make_new(P2PWorkPool* pool,
                                         const std::shared_ptr<GroupState>& group);

  explicit P2PWork(const std::shared_ptr<GroupState>& group)
      : group_raw_(group.get()), group_(group), engine_(group->world->engine) {}

  const GroupState* group_raw_;  ///< identifies group_ (while it lives) for reuse
  std::weak_ptr<GroupState> group_;
  std::weak_ptr<p2p::Engine> engine_;
  std::chrono::milliseconds timeout_{0};
  p2p::Op op_;
};

}  // namespace tpcomm::detail
