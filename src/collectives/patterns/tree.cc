// Tree shapes (see tree.h). Written from the descriptions of NCCL's trees.cc.
#include "collectives/patterns/tree.h"

#include <cstddef>

namespace tpcomm::coll::tree {

namespace {

int lowest_bit(int v) { return v & -v; }

// Maps every rank of a node through f (the parent and children).
template <class F>
Node map_node(const Node& n, F f) {
  Node out;
  out.parent = n.parent < 0 ? -1 : f(n.parent);
  for (int i = 0; i < 2; ++i)
    out.children[static_cast<size_t>(i)] =
        n.children[static_cast<size_t>(i)] < 0 ? -1 : f(n.children[static_cast<size_t>(i)]);
  return out;
}

}  // namespace

Node btree(int n, int rank) {
  Node node;
  if (n <= 1 || rank < 0 || rank >= n) return node;
  if (rank == 0) {
    int c = 1;
    while (c * 2 < n) c *= 2;
    node.children[0] = c;
    return node;
  }
  int b = lowest_bit(rank);
  // Parent: the neighbour at distance b whose lowest set bit is 2b; when that one is out of
  // range, the one below.
  int up = (rank & (b << 1)) ? rank - b : rank + b;
  if (up >= n) up = rank - b;
  node.parent = up;
  // Children: rank - b/2, and rank + c for the largest c <= b/2 that stays in range.
  int half = b >> 1;
  if (half > 0) {
    node.children[0] = rank - half;
    int c = half;
    while (c > 0 && rank + c >= n) c >>= 1;
    if (c > 0) node.children[1] = rank + c;
  }
  return node;
}

std::array<Node, 2> dtree(int n, int rank) {
  std::array<Node, 2> t;
  if (n <= 1 || rank < 0 || rank >= n) return t;
  t[0] = btree(n, rank);
  if (n % 2 == 0) {
    auto mirror = [n](int r) { return n - 1 - r; };
    t[1] = map_node(btree(n, mirror(rank)), mirror);
  } else {
    int pos = (rank - 1 + n) % n;
    t[1] = map_node(btree(n, pos), [n](int p) { return (p + 1) % n; });
  }
  return t;
}

std::array<Node, 2> rooted_dtree(int n, int root, int rank) {
  std::array<Node, 2> t;
  if (n <= 1 || rank < 0 || rank >= n || root < 0 || root >= n) return t;
  int m = n - 1;  // the ranks other than the root, indexed 0..m-1 from root+1
  auto real = [n, root](int i) { return (root + 1 + i) % n; };
  if (rank == root) {
    // The root's only child in each tree is the root of that tree over the others.
    for (int k = 0; k < 2; ++k) {
      int top = 0;
      for (int i = 0; i < m; ++i) {
        if (dtree(m, i)[static_cast<size_t>(k)].parent < 0) {
          top = i;
          break;
        }
      }
      t[static_cast<size_t>(k)].children[0] = real(top);
    }
    if (m == 1) t[1].children[0] = real(0);
    return t;
  }
  int idx = (rank - root - 1 + n) % n;
  if (m == 1) {
    t[0].parent = t[1].parent = root;
    return t;
  }
  std::array<Node, 2> sub = dtree(m, idx);
  for (size_t k = 0; k < 2; ++k) {
    t[k] = map_node(sub[k], real);
    if (sub[k].parent < 0) t[k].parent = root;
  }
  return t;
}

Binomial binomial(int n, int root, int rank) {
  Binomial b;
  if (n <= 0 || rank < 0 || rank >= n) return b;
  int v = (rank - root % n + n) % n;
  b.vrank = v;
  auto real = [n, root](int vr) { return (vr + root) % n; };
  int limit = v == 0 ? n : lowest_bit(v);  // children at distances below v's lowest bit
  if (v != 0) b.parent = real(v - lowest_bit(v));
  for (int d = 1; d < limit && v + d < n; d <<= 1) {
    int cv = v + d;
    int size = d < n - cv ? d : n - cv;
    b.children.push_back(real(cv));
    b.child_vranks.push_back(cv);
    b.child_sizes.push_back(size);
    b.subtree += size;
  }
  return b;
}

int btree_depth(int n) {
  int depth = 0;
  for (int r = 0; r < n; ++r) {
    int d = 0;
    for (int x = r; x != 0; x = btree(n, x).parent) ++d;
    if (d > depth) depth = d;
  }
  return depth;
}

}  // namespace tpcomm::coll::tree
