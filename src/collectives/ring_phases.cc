// Ring passes. Slices are numbered g = step * S + j (S slices per block); the slice received
// at step s is the one sent at step s + 1, so each is forwarded right after it is ready.
#include "collectives/ring_phases.h"

#include <algorithm>
#include <vector>

#include "collectives/patterns/ring.h"
#include "core/reduce.h"

namespace tpcomm::coll {

namespace {

// Shape of one pass.
struct Pass {
  int n, rank;
  size_t count, esize, S, total, slot_elems;
  int window;

  Pass(const CollComm& c, size_t count_, size_t esize_, const ExecParams& p)
      : n(c.size()), rank(c.rank()), count(count_), esize(esize_) {
    size_t max_block = ring::block(count, n, 0).count;
    size_t slice_elems = std::max<size_t>(1, p.slice_bytes / std::max<size_t>(esize, 1));
    S = ring::num_slices(max_block, slice_elems);
    total = static_cast<size_t>(n - 1) * S;
    slot_elems = (max_block + S - 1) / S;
    window = static_cast<int>(std::max<size_t>(1, std::min<size_t>(p.window, total)));
  }
  ring::Range range(int block, size_t g) const {
    return ring::slice(ring::block(count, n, block), S, g % S);
  }
  int step(size_t g) const { return static_cast<int>(g / S); }
};

}  // namespace

void ring_reduce_scatter_inplace(CollComm& comm, void* data, size_t count, const Reducer& red,
                                 const ExecParams& params, int tag, const void* src) {
  Pass ps(comm, count, red.esize(), params);
  if (ps.n == 1) return;
  // Each block is merged once per rank (with this rank's contribution), and sent first (step
  // 0) as this rank's contribution alone: both read `mine`.
  const void* mine = src != nullptr ? src : data;
  const int nxt = ring::next(ps.rank, ps.n), prv = ring::prev(ps.rank, ps.n);
  const size_t es = ps.esize, W = static_cast<size_t>(ps.window);
  Scratch tmp(W * ps.slot_elems * es);
  std::vector<Request> recvs(W);
  std::vector<Request> sends;
  sends.reserve(ps.total);
  auto recv_range = [&](size_t g) {
    return ps.range(ring::rs_recv_block(ps.rank, ps.n, ps.step(g)), g);
  };
  auto post_recv = [&](size_t g) {
    ring::Range r = recv_range(g);
    recvs[g % W] = comm.irecv(tmp.data() + (g % W) * ps.slot_elems * es, r.count * es, prv, tag);
  };
  auto post_send = [&](size_t g) {
    ring::Range r = ps.range(ring::rs_send_block(ps.rank, ps.n, ps.step(g)), g);
    const void* from = ps.step(g) == 0 ? mine : data;
    sends.push_back(comm.isend(at(from, r.offset * es), r.count * es, nxt, tag));
  };
  for (size_t g = 0; g < W; ++g) post_recv(g);
  for (size_t j = 0; j < ps.S; ++j) post_send(j);
  // The last step's merges make this rank's reduced block, sent again only by the all-gather
  // that follows, once every block is done: a block larger than the streaming threshold has
  // left the caches by then, so an out-of-place result is written with streaming stores (no
  // read for ownership of the output). Earlier steps' results are sent at once: cached.
  const size_t final_from = static_cast<size_t>(ps.n - 2) * ps.S;
  const bool stream_final =
      mine != data && ring::block(count, ps.n, ps.rank).count * es >= kernels::nt_threshold();
  for (size_t g = 0; g < ps.total; ++g) {
    comm.wait(recvs[g % W]);
    ring::Range r = recv_range(g);
    void* dst = at(data, r.offset * es);
    const void* tmp_g = tmp.data() + (g % W) * ps.slot_elems * es;
    if (stream_final && g >= final_from)
      red.merge_streaming(dst, at(mine, r.offset * es), tmp_g, r.count);
    else
      red.merge(dst, at(mine, r.offset * es), tmp_g, r.count);
    if (g + W < ps.total) post_recv(g + W);
    if (g + ps.S < ps.total) post_send(g + ps.S);
  }
  comm.wait_all(sends);
}

void ring_all_gather_inplace(CollComm& comm, void* data, size_t count, size_t esize,
                             const ExecParams& params, int tag) {
  Pass ps(comm, count, esize, params);
  if (ps.n == 1) return;
  const int nxt = ring::next(ps.rank, ps.n), prv = ring::prev(ps.rank, ps.n);
  const size_t W = static_cast<size_t>(ps.window);
  std::vector<Request> recvs(W);
  std::vector<Request> sends;
  sends.reserve(ps.total);
  auto post_recv = [&](size_t g) {
    ring::Range r = ps.range(ring::ag_recv_block(ps.rank, ps.n, ps.step(g)), g);
    recvs[g % W] = comm.irecv(at(data, r.offset * esize), r.count * esize, prv, tag);
  };
  auto post_send = [&](size_t g) {
    ring::Range r = ps.range(ring::ag_send_block(ps.rank, ps.n, ps.step(g)), g);
    sends.push_back(comm.isend(at(data, r.offset * esize), r.count * esize, nxt, tag));
  };
  for (size_t g = 0; g < W; ++g) post_recv(g);
  for (size_t j = 0; j < ps.S; ++j) post_send(j);
  for (size_t g = 0; g < ps.total; ++g) {
    comm.wait(recvs[g % W]);
    if (g + W < ps.total) post_recv(g + W);
    if (g + ps.S < ps.total) post_send(g + ps.S);
  }
  comm.wait_all(sends);
}

}  // namespace tpcomm::coll
