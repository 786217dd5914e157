// Recursive doubling and halving (Rabenseifner) arithmetic, with MPICH's fold for groups
// whose size is not a power of two: with p the largest power of two <= n and rem = n - p,
// each even rank among the first 2*rem hands its data to the odd rank after it and sits
// out; the p remaining ranks are renumbered 0..p-1 ("new ranks") and run the power-of-two
// algorithm; at the end the odd ranks hand the result back. Pure functions.
#pragma once

#include <vector>

namespace tpcomm::coll::recursive {

/// Largest power of two <= n (n >= 1).
inline int floor_pow2(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

/// log2 of a power of two.
inline int log2_exact(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}

/// The fold of n ranks onto a power of two.
struct Fold {
  int n = 1;
  int pof2 = 1;
  int rem = 0;

  explicit Fold(int size) : n(size), pof2(floor_pow2(size)), rem(size - floor_pow2(size)) {}

  /// An even rank among the first 2*rem: gives its data to rank + 1 and waits for the result.
  bool sits_out(int rank) const { return rank < 2 * rem && rank % 2 == 0; }
  /// An odd rank among the first 2*rem: takes rank - 1's data and gives the result back.
  bool absorbs(int rank) const { return rank < 2 * rem && rank % 2 == 1; }
  /// The new rank (0..pof2-1) of a participating rank, -1 for a rank that sits out.
  int new_rank(int rank) const {
    if (rank < 2 * rem) return rank % 2 ? rank / 2 : -1;
    return rank - rem;
  }
  /// The rank behind new rank j.
  int old_rank(int j) const { return j < rem ? 2 * j + 1 : j + rem; }
  /// The old ranks new rank j stands for: [first_old(j), end_old(j)) (two for j < rem).
  int first_old(int j) const { return j < rem ? 2 * j : j + rem; }
  int end_old(int j) const { return j < rem ? 2 * j + 2 : j + rem + 1; }
};

/// One step of recursive halving (reduce-scatter) or doubling (all-gather) between new
/// ranks. Ranges are of new ranks, [lo, hi).
struct Step {
  int partner = 0;
  int keep_lo = 0, keep_hi = 0;  ///< halving: the half kept; doubling: the half already held
  int give_lo = 0, give_hi = 0;  ///< halving: the half sent; doubling: the half received
};

/// Recursive halving over pof2 new ranks: at each step the group [lo, hi) splits in two
/// halves; a rank keeps the half it is in and exchanges the other half with its partner at
/// distance (hi - lo) / 2. log2(pof2) steps, largest first.
inline std::vector<Step> halving_steps(int pof2, int new_rank) {
  std::vector<Step> steps;
  int lo = 0, hi = pof2;
  for (int mask = pof2 / 2; mask >= 1; mask /= 2) {
    int mid = lo + mask;
    Step s;
    if (new_rank < mid) {
      s = {new_rank + mask, lo, mid, mid, hi};
    } else {
      s = {new_rank - mask, mid, hi, lo, mid};
    }
    steps.push_back(s);
    lo = s.keep_lo;
    hi = s.keep_hi;
  }
  return steps;
}

/// Recursive doubling all-gather over pof2 new ranks, the reverse of halving_steps: at each
/// step a rank sends the range it holds (keep) and receives its partner's (give).
inline std::vector<Step> doubling_steps(int pof2, int new_rank) {
  std::vector<Step> steps = halving_steps(pof2, new_rank);
  return {steps.rbegin(), steps.rend()};
}

/// Recursive-doubling partner at step k (distance 2^k) among new ranks.
inline int doubling_partner(int new_rank, int k) { return new_rank ^ (1 << k); }

}  // namespace tpcomm::coll::recursive
