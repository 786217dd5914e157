// reduce tree: a double binary tree rooted at the root (tree.h rooted_dtree); the first half
// of the buffer is reduced up tree 0 and the second up tree 1, in pipelined chunks: a rank
// merges chunk k from its children and sends it on while later chunks are still arriving.
#include "collectives/patterns/tree.h"

#include <algorithm>
#include <array>
#include <vector>

#include "collectives/patterns/ring.h"
#include "collectives/reduce/reduce.h"

namespace tpcomm::coll {

void reduce_tree(CollComm& comm, void* work, size_t count, int root, const Reducer& red,
                 const ExecParams& params) {
  if (comm.size() == 1) return;
  const size_t es = red.esize();
  const size_t W = static_cast<size_t>(std::max(1, params.window));
  const size_t slice_elems = std::max<size_t>(1, params.slice_bytes / es);
  std::array<tree::Node, 2> nodes = tree::rooted_dtree(comm.size(), root, comm.rank());
  std::array<ring::Range, 2> half = {ring::part(count, 2, 0), ring::part(count, 2, 1)};
  std::array<size_t, 2> K = {ring::num_slices(half[0].count, slice_elems),
                             ring::num_slices(half[1].count, slice_elems)};
  std::array<size_t, 2> slot = {(half[0].count + K[0] - 1) / K[0],
                                (half[1].count + K[1] - 1) / K[1]};
  auto chunk = [&](size_t t, size_t k) { return ring::slice(half[t], K[t], k); };
  std::array<Scratch, 2> tmp = {Scratch(W * 2 * slot[0] * es), Scratch(W * 2 * slot[1] * es)};
  auto tmp_at = [&](size_t t, size_t k, size_t c) {
    return tmp[t].data() + ((k % W) * 2 + c) * slot[t] * es;
  };
  std::array<std::vector<std::array<Request, 2>>, 2> recvs;
  std::vector<Request> sends;
  auto post_recvs = [&](size_t t, size_t k) {
    for (size_t c = 0; c < 2; ++c) {
      int child = nodes[t].children[c];
      if (child < 0) continue;
      recvs[t][k % W][c] =
          comm.irecv(tmp_at(t, k, c), chunk(t, k).count * es, child, static_cast<int>(t));
    }
  };
  for (size_t t = 0; t < 2; ++t) {
    recvs[t].resize(W);
    for (size_t k = 0; k < std::min(W, K[t]); ++k) post_recvs(t, k);
  }
  for (size_t k = 0; k < std::max(K[0], K[1]); ++k) {
    for (size_t t = 0; t < 2; ++t) {
      if (k >= K[t]) continue;
      ring::Range r = chunk(t, k);
      for (size_t c = 0; c < 2; ++c) {
        if (nodes[t].children[c] < 0) continue;
        comm.wait(recvs[t][k % W][c]);
        red.merge(at(work, r.offset * es), at(work, r.offset * es), tmp_at(t, k, c), r.count);
      }
      if (k + W < K[t]) post_recvs(t, k + W);
      if (nodes[t].parent >= 0) {
        sends.push_back(comm.isend(at(work, r.offset * es), r.count * es, nodes[t].parent,
                                   static_cast<int>(t)));
      }
    }
  }
  comm.wait_all(sends);
}

}  // namespace tpcomm::coll
