// broadcast tree: a double binary tree rooted at the root (tree.h rooted_dtree); the first
// half of the message flows down tree 0 and the second down tree 1, in pipelined chunks, so
// every rank forwards about as much as it receives and the depth is log2(n).
#include "collectives/patterns/tree.h"

#include <algorithm>
#include <array>
#include <vector>

#include "collectives/broadcast/broadcast.h"
#include "collectives/patterns/ring.h"

namespace tpcomm::coll {

void broadcast_tree(CollComm& comm, void* data, size_t bytes, int root, const ExecParams& params) {
  if (comm.size() == 1) return;
  std::array<tree::Node, 2> nodes = tree::rooted_dtree(comm.size(), root, comm.rank());
  const size_t W = static_cast<size_t>(std::max(1, params.window));
  std::array<ring::Range, 2> half = {ring::part(bytes, 2, 0), ring::part(bytes, 2, 1)};
  std::array<size_t, 2> K = {ring::num_slices(half[0].count, params.slice_bytes),
                             ring::num_slices(half[1].count, params.slice_bytes)};
  auto chunk = [&](size_t t, size_t k) { return ring::slice(half[t], K[t], k); };
  std::array<std::vector<Request>, 2> recvs = {std::vector<Request>(W), std::vector<Request>(W)};
  std::vector<Request> sends;
  auto post_recv = [&](size_t t, size_t k) {
    ring::Range r = chunk(t, k);
    recvs[t][k % W] = comm.irecv(at(data, r.offset), r.count, nodes[t].parent, static_cast<int>(t));
  };
  for (size_t t = 0; t < 2; ++t) {
    if (nodes[t].parent < 0) continue;
    for (size_t k = 0; k < std::min(W, K[t]); ++k) post_recv(t, k);
  }
  for (size_t k = 0; k < std::max(K[0], K[1]); ++k) {
    for (size_t t = 0; t < 2; ++t) {
      if (k >= K[t]) continue;
      if (nodes[t].parent >= 0) {
        comm.wait(recvs[t][k % W]);
        if (k + W < K[t]) post_recv(t, k + W);
      }
      ring::Range r = chunk(t, k);
      for (int child : nodes[t].children) {
        if (child >= 0)
          sends.push_back(comm.isend(at(data, r.offset), r.count, child, static_cast<int>(t)));
      }
    }
  }
  comm.wait_all(sends);
}

}  // namespace tpcomm::coll
