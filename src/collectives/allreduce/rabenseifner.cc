// all_reduce Rabenseifner (halving-doubling): after folding the group onto a power of two p,
// recursive halving leaves each of the p ranks with one reduced block of count / p elements
// (log2 p steps, halving the exchanged size each time), then recursive doubling gathers the
// blocks back; the ranks folded out get the result at the end. About 2 (p-1)/p of the buffer
// sent per rank in 2 log2 p steps: medium messages.
#include "collectives/allreduce/allreduce.h"
#include "collectives/halving.h"

namespace tpcomm::coll {

void allreduce_rabenseifner(CollComm& comm, void* data, size_t count, const Reducer& red,
                            const ExecParams&) {
  const int rank = comm.rank();
  const size_t es = red.esize(), bytes = count * es;
  recursive::Fold fold(comm.size());
  enum { kFoldIn = 0, kHalve = 1, kDouble = 2, kFoldOut = 3 };
  if (fold.sits_out(rank)) {
    Request s = comm.isend(data, bytes, rank + 1, kFoldIn);
    comm.wait(s);
    Request rq = comm.irecv(data, bytes, rank + 1, kFoldOut);
    comm.wait(rq);
    return;
  }
  const int p = fold.pof2;
  GroupRange range = [count, p](int lo, int hi) {
    ring::Range a = ring::block(count, p, lo), b = ring::block(count, p, hi - 1);
    return ring::Range{a.offset, b.offset + b.count - a.offset};
  };
  // The first halving step keeps the larger half, blocks [0, p/2).
  const size_t half = p > 1 ? range(0, p / 2).count * es : 0;
  Scratch tmp(fold.absorbs(rank) ? bytes : half);
  if (fold.absorbs(rank)) {
    Request rq = comm.irecv(tmp.data(), bytes, rank - 1, kFoldIn);
    comm.wait(rq);
    red.merge(data, tmp.data(), data, count);
  }
  const int me = fold.new_rank(rank);
  halving_reduce_scatter(comm, data, fold, me, range, red, tmp.data(), kHalve);
  doubling_all_gather(comm, data, fold, me, range, es, kDouble);
  if (fold.absorbs(rank)) {
    Request s = comm.isend(data, bytes, rank - 1, kFoldOut);
    comm.wait(s);
  }
}

}  // namespace tpcomm::coll
