// The buffers of pending receives, so that a receive into memory another pending receive
// still owns is refused. A sorted flat array: usually it holds a handful of ranges, and then
// the check, the insertion and the removal cost no allocation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tpcomm::p2p {

class RangeSet {
 public:
  struct Range {
    uintptr_t start, end;
    uint32_t id;  ///< the owning operation
  };

  /// The range overlapping [start, end), or null.
  const Range* overlap(uintptr_t start, uintptr_t end) const {
    auto it = upper(start);
    if (it != v_.begin() && std::prev(it)->end > start) return &*std::prev(it);
    if (it != v_.end() && it->start < end) return &*it;
    return nullptr;
  }
  /// Adds a range that overlaps none (check with overlap() first).
  void insert(uintptr_t start, uintptr_t end, uint32_t id) {
    if ((v_.empty() || v_.back().start < start) && v_.size() < v_.capacity()) {
      v_.push_back(Range{start, end, id});  // the usual case: after every other range
      return;
    }
    insert_sorted(Range{start, end, id});
  }
  /// Removes the range that starts at `start`.
  void erase(uintptr_t start) {
    if (!v_.empty() && v_.back().start == start) {
      v_.pop_back();
      return;
    }
    auto it = upper(start);
    if (it != v_.begin() && std::prev(it)->start == start) v_.erase(std::prev(it));
  }
  size_t size() const { return v_.size(); }

 private:
  /// insert() where it takes a search or an allocation (out of line: insert() stays inline).
  [[gnu::noinline]] void insert_sorted(const Range& r) { v_.insert(upper(r.start), r); }

  std::vector<Range>::const_iterator upper(uintptr_t start) const {
    return std::upper_bound(v_.begin(), v_.end(), start,
                            [](uintptr_t s, const Range& r) { return s < r.start; });
  }
  std::vector<Range> v_;
};

}  // namespace tpcomm::p2p
