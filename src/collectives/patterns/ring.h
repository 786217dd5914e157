// Ring arithmetic: how `count` elements are cut into one block per rank (uneven counts: the
// first count % n blocks get one element more), which block a rank sends and receives at
// each step of the reduce-scatter and all-gather passes, and how a block is cut into slices
// for pipelining. Pure functions, unit-tested without a network.
#pragma once

#include <algorithm>
#include <cstddef>

namespace tpcomm::coll::ring {

/// A range of elements.
struct Range {
  size_t offset = 0;
  size_t count = 0;
  friend bool operator==(const Range&, const Range&) = default;
};

/// a mod n in [0, n), for negative a too.
inline int mod(int a, int n) { return ((a % n) + n) % n; }
inline int next(int rank, int n) { return mod(rank + 1, n); }
inline int prev(int rank, int n) { return mod(rank - 1, n); }

/// Part i of `count` elements cut into `parts` near-equal parts (the first count % parts
/// parts have one element more).
inline Range part(size_t count, size_t parts, size_t i) {
  size_t q = count / parts, r = count % parts;
  return {i * q + std::min(i, r), q + (i < r ? 1 : 0)};
}

/// Block of rank `i` when `count` elements are shared by `n` ranks.
inline Range block(size_t count, int n, int i) {
  return part(count, static_cast<size_t>(n), static_cast<size_t>(i));
}

/// Reduce-scatter step s (0 .. n-2): the block a rank sends to next(), and the block it
/// receives from prev() and reduces into. After step n-2, rank r holds the reduced block r.
inline int rs_send_block(int rank, int n, int step) { return mod(rank - step - 1, n); }
inline int rs_recv_block(int rank, int n, int step) { return mod(rank - step - 2, n); }

/// All-gather step s (0 .. n-2), starting with each rank holding its own block: the block it
/// sends to next() and the one it receives from prev() (which it forwards at step s+1).
inline int ag_send_block(int rank, int n, int step) { return mod(rank - step, n); }
inline int ag_recv_block(int rank, int n, int step) { return mod(rank - step - 1, n); }

/// How many slices of at most `slice_elems` elements a block of `max_count` elements needs
/// (at least one; every block of a pass is cut into the same number of slices).
inline size_t num_slices(size_t max_count, size_t slice_elems) {
  slice_elems = std::max<size_t>(slice_elems, 1);
  return std::max<size_t>(1, (max_count + slice_elems - 1) / slice_elems);
}

/// Slice j of `nslices` of the range r (near-equal, possibly empty when r is short).
inline Range slice(Range r, size_t nslices, size_t j) {
  Range p = part(r.count, nslices, j);
  return {r.offset + p.offset, p.count};
}

}  // namespace tpcomm::coll::ring
