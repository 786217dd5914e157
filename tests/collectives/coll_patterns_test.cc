// Pure pattern helpers, no network: ring blocks and slices, NCCL-style binary and double
// binary trees (also rooted anywhere), binomial trees, the recursive-doubling fold and
// halving schedule, dissemination, pairwise and Bruck schedules.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "collectives/patterns/recursive.h"
#include "collectives/patterns/ring.h"
#include "collectives/patterns/schedules.h"
#include "collectives/patterns/tree.h"

namespace tpcomm::coll {
namespace {

TEST(RingPattern, BlocksCoverCountInOrderAndDifferByAtMostOne) {
  for (int n = 1; n <= 9; ++n) {
    for (size_t count : {0ul, 1ul, 7ul, 8ul, 13ul, 1000ul, 1001ul}) {
      size_t next = 0, lo = SIZE_MAX, hi = 0;
      for (int i = 0; i < n; ++i) {
        ring::Range b = ring::block(count, n, i);
        EXPECT_EQ(b.offset, next) << "n=" << n << " count=" << count << " i=" << i;
        next += b.count;
        lo = std::min(lo, b.count);
        hi = std::max(hi, b.count);
      }
      EXPECT_EQ(next, count);
      EXPECT_LE(hi - lo, 1u);
      EXPECT_EQ(ring::block(count, n, 0).count, hi) << "the first block is the largest";
    }
  }
  EXPECT_EQ(ring::block(7, 3, 0), (ring::Range{0, 3}));
  EXPECT_EQ(ring::block(7, 3, 1), (ring::Range{3, 2}));
  EXPECT_EQ(ring::block(7, 3, 2), (ring::Range{5, 2}));
}

TEST(RingPattern, ReduceScatterStepsEndWithOwnBlockAndChainAcrossRanks) {
  for (int n = 2; n <= 8; ++n) {
    for (int r = 0; r < n; ++r) {
      std::set<int> sent;
      for (int s = 0; s < n - 1; ++s) {
        // What I receive at step s is what prev sends at step s.
        EXPECT_EQ(ring::rs_recv_block(r, n, s), ring::rs_send_block(ring::prev(r, n), n, s));
        // What I receive at step s I send at step s + 1.
        if (s + 1 < n - 1) {
          EXPECT_EQ(ring::rs_send_block(r, n, s + 1), ring::rs_recv_block(r, n, s));
        }
        sent.insert(ring::rs_send_block(r, n, s));
      }
      EXPECT_EQ(ring::rs_recv_block(r, n, n - 2), r) << "rank ends owning its block";
      EXPECT_EQ(sent.size(), static_cast<size_t>(n - 1));
      EXPECT_EQ(sent.count(r), 0u);
      // All-gather: starts from the own block; receives every other block once.
      EXPECT_EQ(ring::ag_send_block(r, n, 0), r);
      std::set<int> got;
      for (int s = 0; s < n - 1; ++s) {
        EXPECT_EQ(ring::ag_recv_block(r, n, s), ring::ag_send_block(ring::prev(r, n), n, s));
        got.insert(ring::ag_recv_block(r, n, s));
      }
      EXPECT_EQ(got.size(), static_cast<size_t>(n - 1));
      EXPECT_EQ(got.count(r), 0u);
    }
  }
}

TEST(RingPattern, SlicesCoverTheRangeAndAreBoundedBySliceSize) {
  for (size_t count : {0ul, 1ul, 5ul, 64ul, 1000ul}) {
    for (size_t slice : {1ul, 3ul, 64ul, 4096ul}) {
      size_t S = ring::num_slices(count, slice);
      EXPECT_GE(S, 1u);
      ring::Range r{17, count};
      size_t next = 17;
      for (size_t j = 0; j < S; ++j) {
        ring::Range s = ring::slice(r, S, j);
        EXPECT_EQ(s.offset, next);
        EXPECT_LE(s.count, slice);
        next += s.count;
      }
      EXPECT_EQ(next, 17 + count);
    }
  }
  // A shorter block cut into the same number of slices gets some empty ones.
  EXPECT_EQ(ring::slice({0, 1}, 3, 2).count, 0u);
}

// Checks that the nodes of all ranks form one tree rooted at `root`; returns its depth.
int check_tree(int n, int root, const std::vector<tree::Node>& nodes) {
  int depth = 0;
  for (int r = 0; r < n; ++r) {
    const tree::Node& x = nodes[static_cast<size_t>(r)];
    if (r == root) {
      EXPECT_EQ(x.parent, -1);
    } else {
      EXPECT_GE(x.parent, 0) << "rank " << r;
      if (x.parent < 0) return -1;
      const tree::Node& p = nodes[static_cast<size_t>(x.parent)];
      EXPECT_TRUE(p.children[0] == r || p.children[1] == r)
          << "n=" << n << ": rank " << r << " not a child of its parent " << x.parent;
    }
    if (x.children[1] >= 0) {
      EXPECT_GE(x.children[0], 0);
    }
    for (int c : x.children) {
      if (c >= 0) {
        EXPECT_EQ(nodes[static_cast<size_t>(c)].parent, r);
      }
    }
    int d = 0;
    for (int y = r; y != root && d <= n; y = nodes[static_cast<size_t>(y)].parent) ++d;
    EXPECT_LE(d, n) << "cycle at rank " << r;
    depth = std::max(depth, d);
  }
  return depth;
}

TEST(TreePattern, BtreeMatchesNcclShape) {
  // The 14-rank picture in NCCL's trees.cc: 0-8, 8-{4,12}, 4-{2,6}, 12-{10,13}, ...
  EXPECT_EQ(tree::btree(14, 0).children[0], 8);
  EXPECT_EQ(tree::btree(14, 8).children[0], 4);
  EXPECT_EQ(tree::btree(14, 8).children[1], 12);
  EXPECT_EQ(tree::btree(14, 12).children[0], 10);
  EXPECT_EQ(tree::btree(14, 12).children[1], 13);
  EXPECT_EQ(tree::btree(14, 13).parent, 12);
  EXPECT_EQ(tree::btree(14, 5).parent, 6);
  EXPECT_EQ(tree::btree(14, 3).parent, 2);
  EXPECT_TRUE(tree::btree(14, 7).is_leaf());
}

TEST(TreePattern, BtreeAndDoubleTreeAreTreesWithLogDepth) {
  for (int n = 1; n <= 70; ++n) {
    std::vector<tree::Node> t0, t1;
    for (int r = 0; r < n; ++r) {
      t0.push_back(tree::dtree(n, r)[0]);
      t1.push_back(tree::dtree(n, r)[1]);
      EXPECT_EQ(tree::btree(n, r).parent, t0.back().parent);
    }
    int root1 = 0;
    for (int r = 0; r < n; ++r) {
      if (t1[static_cast<size_t>(r)].parent < 0) root1 = r;
    }
    int d0 = check_tree(n, 0, t0), d1 = check_tree(n, root1, t1);
    int log2n = 0;
    while ((1 << log2n) < n) ++log2n;
    EXPECT_LE(d0, log2n + 1) << "n=" << n;
    EXPECT_LE(d1, log2n + 1) << "n=" << n;
    EXPECT_EQ(tree::btree_depth(n), d0);
    // No rank is a leaf in both trees (NCCL's point: the load is shared).
    if (n >= 2) {
      for (int r = 0; r < n; ++r) {
        EXPECT_FALSE(t0[static_cast<size_t>(r)].is_leaf() && t1[static_cast<size_t>(r)].is_leaf())
            << "n=" << n << " rank " << r;
      }
    }
    if (n >= 2 && n % 2 == 0) {  // even: the mirror makes every rank interior in exactly one
      for (int r = 0; r < n; ++r) {
        EXPECT_NE(t0[static_cast<size_t>(r)].is_leaf(), t1[static_cast<size_t>(r)].is_leaf());
      }
    }
  }
}

TEST(TreePattern, RootedDoubleTreeHasTheRootOnTopOfBothTrees) {
  for (int n = 1; n <= 20; ++n) {
    for (int root = 0; root < n; ++root) {
      for (size_t k = 0; k < 2; ++k) {
        std::vector<tree::Node> t;
        for (int r = 0; r < n; ++r) t.push_back(tree::rooted_dtree(n, root, r)[k]);
        check_tree(n, root, t);
        if (n > 1) {
          EXPECT_EQ(t[static_cast<size_t>(root)].num_children(), 1) << "n=" << n;
        }
      }
    }
  }
}

TEST(TreePattern, BinomialSubtreesPartitionTheVirtualRanks) {
  for (int n = 1; n <= 17; ++n) {
    for (int root = 0; root < n; ++root) {
      std::vector<tree::Binomial> b;
      for (int r = 0; r < n; ++r) b.push_back(tree::binomial(n, root, r));
      EXPECT_EQ(b[static_cast<size_t>(root)].vrank, 0);
      EXPECT_EQ(b[static_cast<size_t>(root)].parent, -1);
      EXPECT_EQ(b[static_cast<size_t>(root)].subtree, n);
      for (int r = 0; r < n; ++r) {
        const tree::Binomial& x = b[static_cast<size_t>(r)];
        int covered = 1;
        for (size_t i = 0; i < x.children.size(); ++i) {
          const tree::Binomial& c = b[static_cast<size_t>(x.children[i])];
          EXPECT_EQ(c.parent, r);
          EXPECT_EQ(c.vrank, x.child_vranks[i]);
          EXPECT_EQ(c.subtree, x.child_sizes[i]);
          EXPECT_EQ(c.vrank, x.vrank + covered) << "children's subtrees follow in order";
          covered += c.subtree;
          if (i > 0) {  // distances 1, 2, 4, ... (subtrees may be cut short at the end)
            EXPECT_EQ(x.child_vranks[i] - x.vrank, 2 * (x.child_vranks[i - 1] - x.vrank));
          }
        }
        EXPECT_EQ(covered, x.subtree);
      }
    }
  }
}

TEST(RecursivePattern, FoldPairsTheFirstRanksAndRenumbersTheRest) {
  for (int n = 1; n <= 40; ++n) {
    recursive::Fold f(n);
    EXPECT_EQ(f.pof2 + f.rem, n);
    EXPECT_LT(f.rem, f.pof2);
    std::set<int> news;
    int first = 0;
    for (int r = 0; r < n; ++r) {
      int j = f.new_rank(r);
      if (f.sits_out(r)) {
        EXPECT_EQ(j, -1);
        EXPECT_TRUE(f.absorbs(r + 1));
        continue;
      }
      EXPECT_EQ(f.old_rank(j), r);
      news.insert(j);
    }
    EXPECT_EQ(news.size(), static_cast<size_t>(f.pof2));
    for (int j = 0; j < f.pof2; ++j) {  // old ranks of the new ranks tile 0..n-1 in order
      EXPECT_EQ(f.first_old(j), first);
      first = f.end_old(j);
    }
    EXPECT_EQ(first, n);
  }
  recursive::Fold f6(6);  // MPICH's example: p = 4, rem = 2; 0 -> 1 and 2 -> 3
  EXPECT_TRUE(f6.sits_out(0));
  EXPECT_TRUE(f6.sits_out(2));
  EXPECT_EQ(f6.new_rank(1), 0);
  EXPECT_EQ(f6.new_rank(3), 1);
  EXPECT_EQ(f6.new_rank(4), 2);
  EXPECT_EQ(f6.new_rank(5), 3);
}

TEST(RecursivePattern, HalvingStepsArePairwiseConsistentAndEndOnOwnRank) {
  for (int p : {1, 2, 4, 8, 16}) {
    for (int me = 0; me < p; ++me) {
      auto steps = recursive::halving_steps(p, me);
      EXPECT_EQ(steps.size(), static_cast<size_t>(recursive::log2_exact(p)));
      int size = p;
      for (size_t k = 0; k < steps.size(); ++k) {
        const recursive::Step& s = steps[k];
        auto other = recursive::halving_steps(p, s.partner)[k];
        EXPECT_EQ(other.partner, me);
        EXPECT_EQ(other.keep_lo, s.give_lo);  // I send what the partner keeps
        EXPECT_EQ(other.give_lo, s.keep_lo);
        EXPECT_EQ(s.keep_hi - s.keep_lo, size / 2);
        EXPECT_TRUE(me >= s.keep_lo && me < s.keep_hi);
        size /= 2;
      }
      if (!steps.empty()) {
        EXPECT_EQ(steps.back().keep_lo, me);
        EXPECT_EQ(steps.back().keep_hi, me + 1);
      }
      auto up = recursive::doubling_steps(p, me);
      if (!up.empty()) {
        EXPECT_EQ(up.front().keep_hi - up.front().keep_lo, 1);
      }
    }
  }
  EXPECT_EQ(recursive::doubling_partner(5, 0), 4);
  EXPECT_EQ(recursive::doubling_partner(5, 1), 7);
  EXPECT_EQ(recursive::doubling_partner(5, 2), 1);
}

TEST(Schedules, DisseminationReachesEveryRank) {
  for (int n = 1; n <= 20; ++n) {
    // knows[r] = ranks whose arrival r has (transitively) heard of.
    std::vector<std::set<int>> knows(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) knows[static_cast<size_t>(r)] = {r};
    size_t rounds = schedule::dissemination(n, 0).size();
    for (size_t k = 0; k < rounds; ++k) {
      auto next = knows;
      for (int r = 0; r < n; ++r) {
        auto e = schedule::dissemination(n, r)[k];
        EXPECT_EQ(schedule::dissemination(n, e.to)[k].from, r);
        next[static_cast<size_t>(e.to)].insert(knows[static_cast<size_t>(r)].begin(),
                                               knows[static_cast<size_t>(r)].end());
      }
      knows = next;
    }
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(knows[static_cast<size_t>(r)].size(), static_cast<size_t>(n));
    }
  }
}

TEST(Schedules, PairwiseIsAPermutationPerStepAndCoversAllPairs) {
  for (int n = 1; n <= 9; ++n) {
    std::set<std::pair<int, int>> pairs;
    for (int s = 0; s < n - 1; ++s) {
      std::set<int> targets;
      for (int r = 0; r < n; ++r) {
        auto e = schedule::pairwise(n, r)[static_cast<size_t>(s)];
        EXPECT_EQ(schedule::pairwise(n, e.to)[static_cast<size_t>(s)].from, r);
        targets.insert(e.to);
        pairs.insert({r, e.to});
      }
      EXPECT_EQ(targets.size(), static_cast<size_t>(n));
    }
    EXPECT_EQ(pairs.size(), static_cast<size_t>(n * (n - 1)));
  }
}

TEST(Schedules, BruckGathersEveryBlockOnce) {
  for (int n = 1; n <= 20; ++n) {
    for (int r = 0; r < n; ++r) {
      int have = 1;
      for (auto s : schedule::bruck(n, r)) {
        EXPECT_EQ(s.to, schedule::mod(r - s.dist, n));
        EXPECT_EQ(s.from, schedule::mod(r + s.dist, n));
        EXPECT_LE(s.blocks, have);
        EXPECT_EQ(s.dist, have) << "blocks from rank + dist extend the held run";
        have += s.blocks;
      }
      EXPECT_EQ(have, n);
    }
  }
}

}  // namespace
}  // namespace tpcomm::coll
