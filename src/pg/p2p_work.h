// The Work of a point-to-point operation.
#pragma once

#include <memory>

#include "p2p/engine.h"
#include "pg/group_state.h"
#include "tpcomm/process_group.hpp"

namespace tpcomm::detail {

class P2PWork : public Work {
 public:
  P2PWork(std::shared_ptr<GroupState> group, std::shared_ptr<p2p::Op> op)
      : group_(std::move(group)), engine_(group_->world->engine), op_(std::move(op)) {}

  bool wait(std::optional<std::chrono::milliseconds> timeout) override;
  bool is_completed() override;
  bool is_success() override;
  std::exception_ptr exception() override;
  int source_rank() override;

  const p2p::Op& op() const { return *op_; }

 private:
  std::shared_ptr<GroupState> group_;
  std::shared_ptr<p2p::Engine> engine_;
  std::shared_ptr<p2p::Op> op_;
};

}  // namespace tpcomm::detail
