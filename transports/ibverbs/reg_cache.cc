// Registration cache: see reg_cache.h and docs/ibverbs.md.
#include "transports/ibverbs/reg_cache.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "tpcomm/error.hpp"
#include "transports/ibverbs/mem_monitor.h"

namespace tpcomm::ibv {

struct RegCache::Core {
  const VerbsLib& lib;
  std::vector<ibv_pd*> pds;
  size_t capacity = 0;
  std::string where;
  bool monitored = false;
  std::string why_not;
  int sub = -1;
  bool closed = false;
  std::mutex mu;
  std::map<uintptr_t, Entry*> by_start;  // cached entries (ranges may overlap)
  std::list<Entry*> lru;                 // cached and idle, most recent first
  RegCacheStats st;

  Core(const VerbsLib& l) : lib(l) {}

  void dereg(Entry* e) {
    if (!closed)
      for (ibv_mr* m : e->mrs) lib.dereg_mr(m);
    delete e;
  }
  // Drops cached entries overlapping the ranges the monitor reported (mu held); entries in
  // use are deregistered at their last release. Returns the idle ones to deregister.
  void apply_events(std::vector<Entry*>* out) {
    if (!monitored) return;
    for (auto [a, b] : memmon::take(sub)) {
      for (auto it = by_start.begin(); it != by_start.end();) {
        Entry* e = it->second;
        if (e->start < b && a < e->end) {
          it = by_start.erase(it);
          e->cached = false;
          st.invalidated++;
          if (e->refs == 0) {
            lru.erase(e->lru);
            out->push_back(e);
          } else {
            e->dead = true;
          }
        } else {
          ++it;
        }
      }
    }
  }
  void evict(std::vector<Entry*>* out) {
    while (by_start.size() > capacity && !lru.empty()) {
      Entry* e = lru.back();
      lru.pop_back();
      by_start.erase(e->start);
      e->cached = false;
      st.evicted++;
      out->push_back(e);
    }
  }
  void release(Entry* e) {
    std::vector<Entry*> gone;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (--e->refs > 0) return;
      if (e->cached) {
        lru.push_front(e);
        e->lru = lru.begin();
        evict(&gone);
      } else {
        gone.push_back(e);
      }
    }
    for (Entry* g : gone) dereg(g);
  }
};

RegCache::Ref::~Ref() {
  if (e_ != nullptr) core_->release(e_);
}

RegCache::RegCache(const VerbsLib& lib, std::vector<ibv_pd*> pds, size_t capacity,
                   std::string where)
    : core_(std::make_shared<Core>(lib)) {
  core_->pds = std::move(pds);
  core_->capacity = capacity;
  core_->where = std::move(where);
  if (capacity == 0) {
    core_->why_not = "TPCOMM_IB_REG_CACHE_SIZE=0";
  } else if (memmon::available(&core_->why_not)) {
    core_->monitored = true;
    core_->sub = memmon::subscribe();
  }
}

RegCache::~RegCache() {
  std::lock_guard<std::mutex> lk(core_->mu);
  for (auto& [s, e] : core_->by_start) {
    e->cached = false;
    if (e->refs == 0) core_->lru.erase(e->lru), core_->dereg(e);
  }
  core_->by_start.clear();
  if (core_->monitored) memmon::unsubscribe(core_->sub);
  // Regions still held release their MRs now; their late release only frees memory.
  core_->closed = true;
}

bool RegCache::caching(std::string* why) const {
  if (why) *why = core_->why_not;
  return core_->monitored;
}

RegCacheStats RegCache::stats() const {
  std::lock_guard<std::mutex> lk(core_->mu);
  RegCacheStats s = core_->st;
  s.entries = core_->by_start.size();
  return s;
}

RegCache::Ref RegCache::acquire(void* addr, size_t length) {
  Core& c = *core_;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  uintptr_t start = a & ~(page - 1);
  uintptr_t end = (a + length + page - 1) & ~(page - 1);
  std::vector<Entry*> gone;
  Entry* e = nullptr;
  {
    std::lock_guard<std::mutex> lk(c.mu);
    c.apply_events(&gone);
    // A cached entry that covers the range (capacity is small: a linear walk down is fine).
    for (auto it = c.by_start.upper_bound(start); it != c.by_start.begin();) {
      --it;
      if (it->second->end >= end && !it->second->dead) {
        e = it->second;
        break;
      }
    }
    if (e != nullptr) {
      if (e->refs++ == 0) c.lru.erase(e->lru);
      c.st.hits++;
    }
  }
  for (Entry* g : gone) c.dereg(g);
  gone.clear();
  if (e != nullptr) return Ref(core_, e);

  // Miss. The new entry is in the map before its range is watched and registered, so that
  // an unmap in between drops it like any other.
  auto* n = new Entry();
  n->start = start;
  n->end = end;
  n->refs = 1;
  {
    std::lock_guard<std::mutex> lk(c.mu);
    c.st.misses++;
    if (c.monitored && !c.by_start.count(start)) {
      n->cached = true;
      c.by_start[start] = n;
    }
  }
  auto unlist = [&]() {
    std::lock_guard<std::mutex> lk(c.mu);
    if (n->cached) c.by_start.erase(start), n->cached = false;
  };
  if (n->cached && !memmon::watch(start, end)) unlist();
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  for (size_t r = 0; r < c.pds.size(); ++r) {
    ibv_mr* mr = c.lib.reg_mr(c.pds[r], reinterpret_cast<void*>(start), end - start, access);
    if (mr == nullptr) {
      int err = errno;
      unlist();
      for (ibv_mr* m : n->mrs) c.lib.dereg_mr(m);
      delete n;
      throw TransportError("ibverbs: ibv_reg_mr of " + std::to_string(end - start) + " bytes on " +
                           c.where + " failed: " + std::strerror(err) + " (errno " +
                           std::to_string(err) +
                           "; raise the locked-memory limit, 'ulimit -l unlimited')");
    }
    n->mrs.push_back(mr);
  }
  {
    std::lock_guard<std::mutex> lk(c.mu);
    c.apply_events(&gone);  // an unmap since watch() drops (uncaches) the new entry too
    if (!n->cached) c.st.uncached++;
  }
  for (Entry* g : gone) c.dereg(g);
  return Ref(core_, n);
}

}  // namespace tpcomm::ibv
