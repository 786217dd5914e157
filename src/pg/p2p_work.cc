#include "pg/p2p_work.h"

#include <new>
#include <vector>

#include "tpcomm/error.hpp"

namespace tpcomm::detail {
namespace {

// Per-thread pools: released Works (with their weak references kept) and shared_ptr control
// blocks. Bounded; a thread's pools are freed when it exits, after which releases delete.
constexpr size_t kPoolMax = 128;
// make() looks this far back for a Work of the same group before making a new one.
constexpr size_t kPoolScan = 8;

struct Pools {
  std::vector<P2PWork*> works;
  std::vector<void*> blocks;  ///< control blocks, all of one size (block_bytes)
  size_t block_bytes = 0;
  // Reserved, so that returning into a pool (inside a deleter) never allocates or throws.
  Pools() {
    works.reserve(kPoolMax);
    blocks.reserve(kPoolMax);
  }
  ~Pools() {
    for (P2PWork* w : works) P2PWork::Recycle::destroy(w);
    for (void* b : blocks) ::operator delete(b);
  }
};

// The hot path reads one trivially initialised thread-local (no guard, one TLS lookup); the
// pools themselves are made on a thread's first use and freed by an owner object whose
// thread-exit destructor then marks the thread's pools gone.
struct PoolRef {
  Pools* pools;
  bool gone;
};
thread_local constinit PoolRef t_ref{nullptr, false};

struct PoolOwner {
  Pools pools;
  PoolOwner() { t_ref.pools = &pools; }
  ~PoolOwner() {
    t_ref.pools = nullptr;
    t_ref.gone = true;
  }
};

Pools* this_thread_pools() {
  PoolRef& r = t_ref;
  if (r.pools || r.gone) return r.pools;
  thread_local PoolOwner owner;  // constructed here, once per thread
  return r.pools;
}

// The pools of a thread that has made Works, else null: a thread that only releases them (the
// engine's progress thread completing async operations) deletes instead of hoarding Works
// that it never reuses.
Pools* existing_pools() { return t_ref.pools; }

// Allocator of the Work's control block (std::shared_ptr with a deleter allocates one). It
// allocates from the making thread's pool and frees into the freeing thread's.
template <class T>
struct BlockAlloc {
  using value_type = T;
  Pools* pools = nullptr;
  explicit BlockAlloc(Pools* p) : pools(p) {}
  template <class U>
  BlockAlloc(const BlockAlloc<U>& o) : pools(o.pools) {}  // NOLINT: rebinding
  T* allocate(size_t n) {
    if (n == 1 && pools && !pools->blocks.empty() && pools->block_bytes == sizeof(T)) {
      void* b = pools->blocks.back();
      pools->blocks.pop_back();
      return static_cast<T*>(b);
    }
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    Pools* here = existing_pools();
    if (n == 1 && here && here->blocks.size() < kPoolMax &&
        (here->block_bytes == sizeof(T) || here->blocks.empty())) {
      here->block_bytes = sizeof(T);
      here->blocks.push_back(p);
      return;
    }
    ::operator delete(p);
  }
  template <class U>
  bool operator==(const BlockAlloc<U>&) const {
    return true;
  }
};

}  // namespace

void P2PWork::Recycle::destroy(P2PWork* w) { delete w; }

void P2PWork::Recycle::operator()(P2PWork* w) const {
  // Nothing refers to the op now (the engine held it through this very count).
  w->op_.reset();
  Pools* here = existing_pools();
  if (here && here->works.size() < kPoolMax && !w->group_.expired()) {
    here->works.push_back(w);
    return;
  }
  destroy(w);
}

P2PWork::Made P2PWork::make(const std::shared_ptr<GroupState>& group) {
  P2PWork* w = nullptr;
  Pools* pools = this_thread_pools();
  if (pools) {
    auto& pool = pools->works;
    size_t stop = pool.size() > kPoolScan ? pool.size() - kPoolScan : 0;
    for (size_t i = pool.size(); i-- > stop;) {
      P2PWork* c = pool[i];
      // The raw address identifies the group only while the group lives (a new group may
      // reuse the memory of a dead one).
      if (c->group_raw_ == group.get() && !c->group_.expired()) {
        w = c;
        pool[i] = pool.back();
        pool.pop_back();
        break;
      }
    }
    // Works of dead groups leave the pool (they keep the group's storage allocated through
    // their weak references) whenever a new Work has to be made.
    if (!w) {
      for (size_t i = pool.size(); i-- > 0;) {
        if (!pool[i]->group_.expired()) continue;
        Recycle::destroy(pool[i]);
        pool[i] = pool.back();
        pool.pop_back();
      }
    }
  }
  if (!w) w = new P2PWork(group);
  w->timeout_ = group->timeout;
  std::shared_ptr<P2PWork> owner(w, Recycle{}, BlockAlloc<P2PWork>(pools));
  P2PWork* raw = owner.get();
  return Made{raw, std::shared_ptr<p2p::Op>(std::move(owner), &raw->op_)};
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
