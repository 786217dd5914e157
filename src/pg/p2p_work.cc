#include "pg/p2p_work.h"

namespace tpcomm::detail {

bool P2PWork::wait(std::optional<std::chrono::milliseconds> timeout) {
  engine().wait(op_, timeout.value_or(group_->timeout));
  return true;
}

bool P2PWork::is_completed() { return engine().test(op_); }

bool P2PWork::is_success() { return is_completed() && !op_.error; }

std::exception_ptr P2PWork::exception() {
  return op_.done.load(std::memory_order_acquire) ? op_.error : nullptr;
}

int P2PWork::source_rank() {
  if (!op_.done.load(std::memory_order_acquire) || op_.error || op_.kind != p2p::Op::Kind::Recv)
    return -1;
  return group_->find_group_rank(op_.source);
}

}  // namespace tpcomm::detail
