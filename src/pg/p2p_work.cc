#include "pg/p2p_work.h"

#include <atomic>
#include <vector>

#include "tpcomm/error.hpp"

namespace tpcomm::detail {

// Per-thread pool of the Works this thread made, each still referenced from here (null: an
// empty place). A Work whose only reference is the pool's (its user and the engine dropped
// theirs) is free for make(). Bounded; a thread's pool is released when it exits (Works still
// held elsewhere live on and are deleted by their last holder).
//
// make() looks at no more than kPoolScan places, going backwards (circularly) from where the
// last look stopped or found one: with many Works outstanding (all in use) a new operation
// costs a bounded look, and successive looks sweep the whole pool, dropping on the way the
// free Works of dead groups (they keep the group's storage allocated through their weak
// references).
struct P2PWorkPool {
  static constexpr size_t kMax = 128;
  static constexpr size_t kScan = 16;
  std::vector<std::shared_ptr<P2PWork>> works;
  size_t next = 0;                        ///< where make() looks first
  size_t hole = static_cast<size_t>(-1);  ///< an empty place, if the last look saw one
  P2PWorkPool() { works.reserve(kMax); }
};

namespace {

// The hot path reads one trivially initialised thread-local (no guard, one TLS lookup); the
// pool itself is made on a thread's first use and freed by an owner object whose thread-exit
// destructor then marks the thread's pool gone.
struct PoolRef {
  P2PWorkPool* pool;
  bool gone;
};
thread_local constinit PoolRef t_ref{nullptr, false};

struct PoolOwner {
  P2PWorkPool pool;
  PoolOwner() { t_ref.pool = &pool; }
  ~PoolOwner() {
    t_ref.pool = nullptr;
    t_ref.gone = true;
  }
};

P2PWorkPool* this_thread_pool() {
  PoolRef& r = t_ref;
  if (r.pool || r.gone) return r.pool;
  thread_local PoolOwner owner;  // constructed here, once per thread
  return r.pool;
}

}  // namespace

P2PWork::Made P2PWork::make(const std::shared_ptr<GroupState>& group) {
  P2PWorkPool* pool = this_thread_pool();
  if (pool && !pool->works.empty()) {
    auto& works = pool->works;
    const size_t n = works.size();
    size_t i = pool->next < n ? pool->next : n - 1;
    for (size_t k = 0; k < n && k < P2PWorkPool::kScan; ++k, i = i ? i - 1 : n - 1) {
      std::shared_ptr<P2PWork>& c = works[i];
      // Free: nobody but the pool holds it.
      if (c && c.use_count() == 1) {
        // The last other holder let go with a release decrement (maybe on another thread,
        // the engine's progress thread): see its writes before reusing or deleting the Work.
        // The raw address identifies the group only while the group lives (a new group may
        // reuse the memory of a dead one).
        if (c->group_raw_ == group.get() && !c->group_.expired()) {
          std::atomic_thread_fence(std::memory_order_acquire);
          pool->next = i;
          P2PWork* w = c.get();
          w->op_.reset();
          w->timeout_ = group->timeout;
          return Made{w, std::shared_ptr<p2p::Op>(c, &w->op_)};
        }
        if (c->group_.expired()) {
          std::atomic_thread_fence(std::memory_order_acquire);
          c.reset();
        }
      }
      if (!c) pool->hole = i;
    }
    pool->next = i;  // the next look goes on from here
  }
  return make_new(pool, group);
}

P2PWork::Made P2PWork::make_new(P2PWorkPool* pool, const std::shared_ptr<GroupState>& group) {
  std::shared_ptr<P2PWork> owner(new P2PWork(group));
  P2PWork* w = owner.get();
  w->timeout_ = group->timeout;
  if (pool) {
    auto& works = pool->works;
    if (pool->hole < works.size() && !works[pool->hole]) {
      works[pool->hole] = owner;
      pool->hole = static_cast<size_t>(-1);
    } else if (works.size() < P2PWorkPool::kMax) {
      works.push_back(owner);
    }
  }
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
