// Tree shapes: NCCL's binary tree and double binary tree, the same rooted at any rank, and
// binomial trees. Pure functions over (group size, rank), unit-tested without a network.
#pragma once

#include <array>
#include <vector>

namespace tpcomm::coll::tree {

/// One rank's place in a binary tree: its parent (-1 for the root) and up to two children
/// (-1 where absent; children[0] is set whenever there is one child).
struct Node {
  int parent = -1;
  std::array<int, 2> children{-1, -1};
  int num_children() const { return (children[0] >= 0) + (children[1] >= 0); }
  bool is_leaf() const { return num_children() == 0; }
};

/// NCCL's binary tree over ranks 0..n-1, rooted at 0 (which has a single child, the highest
/// power of two below n). A rank whose lowest set bit is b has children rank - b/2 and
/// rank + b/2 (or a nearer one when that is out of range); odd ranks are the leaves.
Node btree(int n, int rank);

/// NCCL's double binary tree: tree 0 is btree(); tree 1 is its mirror (rank -> n-1-rank)
/// when n is even, or it shifted by one when n is odd, so that no rank is a leaf in both
/// and each tree carries half of the data.
std::array<Node, 2> dtree(int n, int rank);

/// A double binary tree rooted at `root`: in both trees the root's only child is the root of
/// that tree of a double binary tree over the other n-1 ranks (taken in order root+1, ...).
/// Broadcast and reduce send half of the data down (or up) each tree.
std::array<Node, 2> rooted_dtree(int n, int root, int rank);

/// One rank's place in a binomial tree rooted at `root`, numbered by virtual rank
/// v = (rank - root) mod n. A child at distance 2^k roots a subtree of min(2^k, n - child_v)
/// ranks, the virtual ranks [child_v, child_v + size).
struct Binomial {
  int vrank = 0;
  int parent = -1;                ///< real rank; -1 at the root
  std::vector<int> children;      ///< real ranks, nearest (smallest subtree) first
  std::vector<int> child_vranks;  ///< their virtual ranks
  std::vector<int> child_sizes;   ///< their subtree sizes
  int subtree = 1;                ///< ranks in this rank's subtree, itself included
};
Binomial binomial(int n, int root, int rank);

/// Depth of the deepest rank (root: 0), for tests and the cost model.
int btree_depth(int n);

}  // namespace tpcomm::coll::tree
