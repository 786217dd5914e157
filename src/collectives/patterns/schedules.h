// Peer schedules of the single-pattern algorithms: the dissemination barrier, the pairwise
// all-to-all exchange, and Bruck's all-gather. Pure functions.
#pragma once

#include <algorithm>
#include <vector>

namespace tpcomm::coll::schedule {

/// One step: send to `to`, receive from `from`.
struct Exchange {
  int to = 0;
  int from = 0;
};

inline int mod(int a, int n) { return ((a % n) + n) % n; }

/// Dissemination barrier: ceil(log2 n) steps; at step k a rank signals rank + 2^k and waits
/// for rank - 2^k. After the last step every rank has (transitively) heard from all.
inline std::vector<Exchange> dissemination(int n, int rank) {
  std::vector<Exchange> out;
  for (int d = 1; d < n; d *= 2) out.push_back({mod(rank + d, n), mod(rank - d, n)});
  return out;
}

/// Pairwise all-to-all: n-1 steps; at step s (1..n-1) a rank sends to rank + s and receives
/// from rank - s, so that every pair exchanges exactly once and each step is a permutation.
inline std::vector<Exchange> pairwise(int n, int rank) {
  std::vector<Exchange> out;
  for (int s = 1; s < n; ++s) out.push_back({mod(rank + s, n), mod(rank - s, n)});
  return out;
}

/// One step of Bruck's all-gather: a rank holding blocks rank, rank+1, ..., rank+have-1 (in
/// that order) sends the first `blocks` of them to rank - dist and receives `blocks` blocks
/// (those of rank + dist, ...) from rank + dist, appending them.
struct BruckStep {
  int to = 0;
  int from = 0;
  int dist = 0;
  int blocks = 0;
};

/// ceil(log2 n) steps; distances 1, 2, 4, ...; the last step may carry fewer blocks.
inline std::vector<BruckStep> bruck(int n, int rank) {
  std::vector<BruckStep> out;
  for (int d = 1; d < n; d *= 2) {
    out.push_back({mod(rank - d, n), mod(rank + d, n), d, std::min(d, n - d)});
  }
  return out;
}

}  // namespace tpcomm::coll::schedule
