// The Work of a point-to-point operation. It holds the engine's Op itself (one allocation
// per isend/irecv: the engine keeps the Work alive through an aliasing pointer to its Op
// while the operation is in flight). So that this never makes a cycle (engine -> pending op
// -> Work -> group -> engine), the Work refers to its group and engine weakly: a Work whose
// group and engine are gone was completed by the engine's shutdown (AbortedError).
#pragma once

#include <memory>

#include "p2p/engine.h"
#include "pg/group_state.h"
#include "tpcomm/process_group.hpp"

namespace tpcomm::detail {

class P2PWork : public Work {
 public:
  explicit P2PWork(const std::shared_ptr<GroupState>& group)
      : group_(group), engine_(group->world->engine), timeout_(group->timeout) {}

  /// A new Work whose Op the engine fills in: pass `op` to Engine::post_send / post_recv.
  static std::shared_ptr<P2PWork> make(const std::shared_ptr<GroupState>& group,
                                       std::shared_ptr<p2p::Op>* op) {
    auto w = std::make_shared<P2PWork>(group);
    *op = std::shared_ptr<p2p::Op>(w, &w->op_);
    return w;
  }

  bool wait(std::optional<std::chrono::milliseconds> timeout) override;
  bool is_completed() override;
  bool is_success() override;
  std::exception_ptr exception() override;
  int source_rank() override;

  const p2p::Op& op() const { return op_; }

 private:
  std::weak_ptr<GroupState> group_;
  std::weak_ptr<p2p::Engine> engine_;
  std::chrono::milliseconds timeout_;
  p2p::Op op_;
};

}  // namespace tpcomm::detail
