// The engine's operations in flight, by id: a slab indexed by the id's low bits, so that
// adding, finding and removing an operation costs no allocation and no hashing on the
// latency path. Ids carry a generation in their high bits, so a stale id (a late CTS for a
// cancelled send) does not find the operation that reused its slot.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "p2p/op.h"
#include "tpcomm/error.hpp"

namespace tpcomm::p2p {

class OpTable {
 public:
  static constexpr uint32_t kIndexBits = 20;  ///< up to ~1M operations in flight
  static constexpr uint32_t kIndexMask = (1u << kIndexBits) - 1;

  /// Stores `op` and sets op->id (never 0). Throws when a million operations are in flight.
  uint32_t add(const std::shared_ptr<Op>& op) {
    uint32_t idx;
    if (!free_.empty()) {
      idx = free_.back();
      free_.pop_back();
    } else {
      idx = grow();
    }
    uint32_t g = (gens_[idx] + 1) & ((1u << (32 - kIndexBits)) - 1);
    if (g == 0) g = 1;  // ids are never 0
    gens_[idx] = g;
    slots_[idx] = op;
    ++live_;
    op->id = (g << kIndexBits) | idx;
    return op->id;
  }

  /// The live operation with this id, or null.
  const std::shared_ptr<Op>* find(uint32_t id) const {
    uint32_t idx = id & kIndexMask;
    if (idx >= slots_.size() || gens_[idx] != (id >> kIndexBits) || !slots_[idx]) return nullptr;
    return &slots_[idx];
  }

  /// Removes the operation with this id if it is `op` (or any, when op is null).
  void erase(uint32_t id, const Op* op = nullptr) {
    uint32_t idx = id & kIndexMask;
    if (idx >= slots_.size() || gens_[idx] != (id >> kIndexBits) || !slots_[idx]) return;
    if (op && slots_[idx].get() != op) return;
    slots_[idx].reset();
    free_.push_back(idx);
    --live_;
  }

  /// Removes and returns the operation with this id if it is `op`; else null.
  std::shared_ptr<Op> take(uint32_t id, const Op* op) {
    uint32_t idx = id & kIndexMask;
    if (idx >= slots_.size() || gens_[idx] != (id >> kIndexBits) || slots_[idx].get() != op)
      return nullptr;
    free_.push_back(idx);
    --live_;
    return std::move(slots_[idx]);
  }

  /// Every live operation (a copy: callers fail or complete them while iterating).
  std::vector<std::shared_ptr<Op>> snapshot() const {
    std::vector<std::shared_ptr<Op>> out;
    out.reserve(live_);
    for (const auto& s : slots_)
      if (s) out.push_back(s);
    return out;
  }

  size_t size() const { return live_; }

 private:
  /// A new slot at the end (out of line: add() stays small enough to inline).
  [[gnu::noinline]] uint32_t grow() {
    if (slots_.size() > kIndexMask)
      throw Error("p2p: more than " + std::to_string(kIndexMask + 1) +
                  " operations in flight on this rank; wait for some before posting more");
    slots_.emplace_back();
    gens_.push_back(0);
    return static_cast<uint32_t>(slots_.size() - 1);
  }

  std::vector<std::shared_ptr<Op>> slots_;
  std::vector<uint32_t> gens_;
  std::vector<uint32_t> free_;
  size_t live_ = 0;
};

}  // namespace tpcomm::p2p
