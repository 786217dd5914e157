#include "pg/p2p_work.h"

#include "tpcomm/error.hpp"

namespace tpcomm::detail {

bool P2PWork::wait(std::optional<std::chrono::milliseconds> timeout) {
  if (!op_.done.load(std::memory_order_acquire)) {
    if (auto e = engine_.lock()) {
      e->wait(op_, timeout.value_or(timeout_));
      return true;
    }
    // The engine is gone: its shutdown completed every pending op; nothing will progress.
    if (!op_.done.load(std::memory_order_acquire))
      throw AbortedError(op_.describe() + ": the process group was destroyed");
  }
  if (op_.error) std::rethrow_exception(op_.error);
  return true;
}

bool P2PWork::is_completed() {
  if (op_.done.load(std::memory_order_acquire)) return true;
  auto e = engine_.lock();
  return e ? e->test(op_) : op_.done.load(std::memory_order_acquire);
}

bool P2PWork::is_success() { return is_completed() && !op_.error; }

std::exception_ptr P2PWork::exception() {
  return op_.done.load(std::memory_order_acquire) ? op_.error : nullptr;
}

int P2PWork::source_rank() {
  if (!op_.done.load(std::memory_order_acquire) || op_.error || op_.kind != p2p::Op::Kind::Recv)
    return -1;
  auto g = group_.lock();
  return g ? g->find_group_rank(op_.source) : -1;
}

}  // namespace tpcomm::detail
