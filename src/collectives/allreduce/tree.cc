// all_reduce double binary tree (NCCL's): the buffer is cut in two halves, each reduced up one
// of two complementary binary trees and broadcast back down it, in pipelined chunks. A rank is
// interior in at most one tree, so the two halves share the links evenly. Up and down traffic
// of different chunks are in flight together: the rank runs an event loop that reduces a
// chunk as soon as its children's pieces arrive and forwards a result chunk as soon as it
// comes down, waiting (wait_any) only when nothing is ready. Latency grows with log2(n).
#include "collectives/patterns/tree.h"

#include <algorithm>
#include <array>
#include <vector>

#include "collectives/allreduce/allreduce.h"
#include "collectives/patterns/ring.h"
#include "tpcomm/error.hpp"

namespace tpcomm::coll {

namespace {

// One tree's progress on this rank. Chunk k uses slot k % W of each window.
struct TreeRun {
  tree::Node node;
  ring::Range half;  // elements this tree carries
  size_t K = 0;      // chunks
  size_t slot_elems = 0;
  Scratch tmp;                                  // W slots x 2 children
  std::vector<std::array<Request, 2>> up_recv;  // from children
  std::vector<Request> up_send;                 // to the parent
  std::vector<Request> down_recv;               // from the parent
  size_t up_posted = 0, up_done = 0, down_posted = 0, down_done = 0;
  int up_tag = 0, down_tag = 0;

  bool root() const { return node.parent < 0; }
  bool finished() const { return root() ? up_done == K : down_done == K; }
  ring::Range chunk(size_t k) const { return ring::slice(half, K, k); }
};

}  // namespace

void allreduce_tree(CollComm& comm, void* data, size_t count, const Reducer& red,
                    const ExecParams& params) {
  const int n = comm.size();
  if (n == 1) return;
  const size_t es = red.esize();
  const size_t W = static_cast<size_t>(std::max(1, params.window));
  const size_t slice_elems = std::max<size_t>(1, params.slice_bytes / es);
  std::array<tree::Node, 2> nodes = tree::dtree(n, comm.rank());
  std::array<TreeRun, 2> runs;
  for (size_t t = 0; t < 2; ++t) {
    TreeRun& s = runs[t];
    s.node = nodes[t];
    s.half = ring::part(count, 2, t);
    s.K = ring::num_slices(s.half.count, slice_elems);
    s.slot_elems = (s.half.count + s.K - 1) / s.K;
    s.tmp = Scratch(W * 2 * s.slot_elems * es);
    s.up_recv.resize(W);
    s.up_send.resize(W);
    s.down_recv.resize(W);
    s.up_tag = static_cast<int>(2 * t);
    s.down_tag = static_cast<int>(2 * t + 1);
  }
  std::vector<Request> child_sends;
  auto ptr = [&](const TreeRun& s, size_t k) { return at(data, s.chunk(k).offset * es); };
  auto tmp_slot = [&](TreeRun& s, size_t k, size_t c) {
    return s.tmp.data() + ((k % W) * 2 + c) * s.slot_elems * es;
  };
  auto send_down = [&](TreeRun& s, size_t k) {
    for (int child : s.node.children) {
      if (child >= 0) {
        child_sends.push_back(comm.isend(ptr(s, k), s.chunk(k).count * es, child, s.down_tag));
      }
    }
  };

  for (;;) {
    bool progress = false;
    for (TreeRun& s : runs) {
      // Post the children's pieces of the next chunks.
      while (s.node.num_children() > 0 && s.up_posted < s.K && s.up_posted < s.up_done + W) {
        size_t k = s.up_posted++;
        for (size_t c = 0; c < 2; ++c) {
          int child = s.node.children[c];
          if (child < 0) continue;
          s.up_recv[k % W][c] =
              comm.irecv(tmp_slot(s, k, c), s.chunk(k).count * es, child, s.up_tag);
        }
      }
      // Reduce chunks whose pieces have all arrived; send them up (or, at the root, down).
      const bool leaf = s.node.num_children() == 0;
      while (s.up_done < s.K && (leaf || s.up_done < s.up_posted) &&
             (s.root() || s.up_done < s.down_posted + W)) {
        size_t k = s.up_done;
        auto& rq = s.up_recv[k % W];
        if (!comm.test(rq[0]) || !comm.test(rq[1])) break;
        for (size_t c = 0; c < 2; ++c) {
          if (s.node.children[c] >= 0) {
            red.merge(ptr(s, k), ptr(s, k), tmp_slot(s, k, c), s.chunk(k).count);
          }
        }
        if (s.root()) {
          send_down(s, k);
        } else {
          s.up_send[k % W] = comm.isend(ptr(s, k), s.chunk(k).count * es, s.node.parent, s.up_tag);
        }
        ++s.up_done;
        progress = true;
      }
      if (s.root()) continue;
      // Once a chunk has left for the parent, its memory may receive the result.
      while (s.down_posted < s.up_done && s.down_posted < s.down_done + W &&
             comm.test(s.up_send[s.down_posted % W])) {
        size_t k = s.down_posted++;
        s.down_recv[k % W] =
            comm.irecv(ptr(s, k), s.chunk(k).count * es, s.node.parent, s.down_tag);
        progress = true;
      }
      // Forward result chunks to the children.
      while (s.down_done < s.down_posted && comm.test(s.down_recv[s.down_done % W])) {
        send_down(s, s.down_done++);
        progress = true;
      }
    }
    if (runs[0].finished() && runs[1].finished()) break;
    if (progress) continue;
    std::vector<Request*> gating;
    for (TreeRun& s : runs) {
      if (s.up_done < s.K) {
        for (Request& r : s.up_recv[s.up_done % W]) gating.push_back(&r);
      }
      if (s.down_posted < s.up_done) gating.push_back(&s.up_send[s.down_posted % W]);
      if (s.down_done < s.down_posted) gating.push_back(&s.down_recv[s.down_done % W]);
    }
    if (comm.wait_any(gating) < 0) {
      throw Error("all_reduce tree: internal error: no operation to wait for");
    }
  }
  comm.wait_all(child_sends);
}

}  // namespace tpcomm::coll
