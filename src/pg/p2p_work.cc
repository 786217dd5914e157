#include "pg/p2p_work.h"

#include <atomic>
#include <vector>

#include "tpcomm/error.hpp"

namespace tpcomm::detail {
namespace {

// Per-thread pool of the Works this thread made, each still referenced from here. A Work whose
// only reference is the pool's (its user and the engine dropped theirs) is free for make().
// Bounded; a thread's pool is released when it exits (Works still held elsewhere live on and
// are deleted by their last holder).
constexpr size_t kPoolMax = 128;

struct Pool {
  std::vector<std::shared_ptr<P2PWork>> works;
  Pool() { works.reserve(kPoolMax); }
};

// The hot path reads one trivially initialised thread-local (no guard, one TLS lookup); the
// pool itself is made on a thread's first use and freed by an owner object whose thread-exit
// destructor then marks the thread's pool gone.
struct PoolRef {
  Pool* pool;
  bool gone;
};
thread_local constinit PoolRef t_ref{nullptr, false};

struct PoolOwner {
  Pool pool;
  PoolOwner() { t_ref.pool = &pool; }
  ~PoolOwner() {
    t_ref.pool = nullptr;
    t_ref.gone = true;
  }
};

Pool* this_thread_pool() {
  PoolRef& r = t_ref;
  if (r.pool || r.gone) return r.pool;
  thread_local PoolOwner owner;  // constructed here, once per thread
  return r.pool;
}

}  // namespace

P2PWork::Made P2PWork::make(const std::shared_ptr<GroupState>& group) {
  if (Pool* pool = this_thread_pool()) {
    const auto& works = pool->works;
    for (size_t i = works.size(); i-- > 0;) {
      const std::shared_ptr<P2PWork>& c = works[i];
      // Free: nobody but the pool holds it. The raw address identifies the group only while
      // the group lives (a new group may reuse the memory of a dead one).
      if (c.use_count() != 1 || c->group_raw_ != group.get() || c->group_.expired()) continue;
      // The last other holder let go with a release decrement (maybe on another thread, the
      // engine's progress thread): see its writes before reusing the Work.
      std::atomic_thread_fence(std::memory_order_acquire);
      P2PWork* w = c.get();
      w->op_.reset();
      w->timeout_ = group->timeout;
      return Made{w, std::shared_ptr<p2p::Op>(c, &w->op_)};
    }
  }
  return make_new(group);
}

P2PWork::Made P2PWork::make_new(const std::shared_ptr<GroupState>& group) {
  Pool* pool = this_thread_pool();
  if (pool) {
    // Free Works of dead groups leave the pool (they keep the group's storage allocated
    // through their weak references) before a new one joins it.
    auto& works = pool->works;
    for (size_t i = works.size(); i-- > 0;) {
      if (works[i].use_count() != 1 || !works[i]->group_.expired()) continue;
      std::atomic_thread_fence(std::memory_order_acquire);
      works[i] = std::move(works.back());
      works.pop_back();
    }
  }
  std::shared_ptr<P2PWork> owner(new P2PWork(group));
  P2PWork* w = owner.get();
  w->timeout_ = group->timeout;
  if (pool && pool->works.size() < kPoolMax) pool->works.push_back(owner);
  return Made{w, std::shared_ptr<p2p::Op>(std::move(owner), &w->op_)};
}

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
