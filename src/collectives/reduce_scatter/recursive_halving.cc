// reduce_scatter recursive halving: after MPICH's fold onto a power of two p (the even rank
// of each of the first 2*rem pairs hands its whole input to the odd one), log2 p steps each
// exchange half of the remaining range with a partner and merge the other half. A new rank
// stands for one or two old ranks, whose blocks are contiguous, so the ranges stay
// contiguous; at the end each odd rank of a pair hands its partner that partner's block.
#include <cstring>

#include "collectives/halving.h"
#include "collectives/reduce_scatter/reduce_scatter.h"

namespace tpcomm::coll {

void reduce_scatter_recursive_halving(CollComm& comm, void* work, void* output, size_t count,
                                      const Reducer& red, const ExecParams&) {
  const int rank = comm.rank(), n = comm.size();
  const size_t es = red.esize(), total = count * static_cast<size_t>(n);
  recursive::Fold fold(n);
  enum { kFoldIn = 0, kHalve = 1, kFoldOut = 2 };
  if (fold.sits_out(rank)) {
    Request s = comm.isend(work, total * es, rank + 1, kFoldIn);
    comm.wait(s);
    Request rq = comm.irecv(output, count * es, rank + 1, kFoldOut);
    comm.wait(rq);
    return;
  }
  GroupRange range = [&fold, count](int lo, int hi) {
    size_t first = static_cast<size_t>(fold.first_old(lo));
    size_t end = static_cast<size_t>(fold.end_old(hi - 1));
    return ring::Range{first * count, (end - first) * count};
  };
  const size_t half = fold.pof2 > 1 ? range(0, fold.pof2 / 2).count : 0;
  Scratch tmp((fold.absorbs(rank) ? total : half) * es);
  if (fold.absorbs(rank)) {
    Request rq = comm.irecv(tmp.data(), total * es, rank - 1, kFoldIn);
    comm.wait(rq);
    red.merge(work, tmp.data(), work, total);
  }
  halving_reduce_scatter(comm, work, fold, fold.new_rank(rank), range, red, tmp.data(), kHalve);
  if (fold.absorbs(rank)) {
    Request s = comm.isend(at(work, static_cast<size_t>(rank - 1) * count * es), count * es,
                           rank - 1, kFoldOut);
    comm.wait(s);
  }
  std::memcpy(output, at(work, static_cast<size_t>(rank) * count * es), count * es);
}

}  // namespace tpcomm::coll
