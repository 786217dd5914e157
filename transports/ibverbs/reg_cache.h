// Registration cache of the ibverbs transport (docs/ibverbs.md "Registration cache"): memory
// regions keyed by page-aligned range, registered once on every rail's protection domain and
// reused across calls, at most `capacity` idle entries (least recently used evicted). An entry
// is cached only while the memory monitor (mem_monitor.h, userfaultfd) watches its range: an
// unmap, an madvise(MADV_DONTNEED/MADV_FREE/MADV_REMOVE) or an mremap of any part of it drops
// the entry before the call that changed the mapping returns, so a new mapping at the same
// address is registered afresh. Without the monitor every call registers and deregisters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transports/ibverbs/verbs_lib.h"

namespace tpcomm::ibv {

/// Counters for tests and logs.
struct RegCacheStats {
  uint64_t hits = 0, misses = 0, invalidated = 0, evicted = 0, uncached = 0;
  size_t entries = 0;  ///< cached now
};

class RegCache {
 public:
  /// One registration: an MR per rail covering [start, end).
  struct Entry {
    uintptr_t start = 0, end = 0;
    std::vector<ibv_mr*> mrs;
    int refs = 0;
    bool cached = false;  ///< in the map (watched); false: deregistered at the last release
    bool dead = false;    ///< invalidated while in use: deregistered at the last release
    std::list<Entry*>::iterator lru;
  };
  struct Core;
  /// A held registration; releases it when destroyed.
  class Ref {
   public:
    Ref() = default;
    Ref(std::shared_ptr<Core> c, Entry* e) : core_(std::move(c)), e_(e) {}
    Ref(Ref&& o) noexcept : core_(std::move(o.core_)), e_(o.e_) { o.e_ = nullptr; }
    Ref& operator=(Ref&&) = delete;
    ~Ref();
    const Entry* entry() const { return e_; }

   private:
    std::shared_ptr<Core> core_;
    Entry* e_ = nullptr;
  };

  /// `pds`: one protection domain per rail; `where` names the NICs in errors. capacity 0:
  /// no caching.
  RegCache(const VerbsLib& lib, std::vector<ibv_pd*> pds, size_t capacity, std::string where);
  ~RegCache();
  RegCache(const RegCache&) = delete;
  RegCache& operator=(const RegCache&) = delete;

  /// Registers (or finds) [addr, addr + length), length > 0. Throws TransportError naming the
  /// NIC, the size and errno when ibv_reg_mr fails.
  Ref acquire(void* addr, size_t length);
  RegCacheStats stats() const;
  /// Whether entries can be cached here, and why not (no userfaultfd, cache size 0).
  bool caching(std::string* why = nullptr) const;

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace tpcomm::ibv
