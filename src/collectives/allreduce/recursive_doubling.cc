// all_reduce recursive doubling: after folding the group onto a power of two p, log2(p)
// steps each exchange the whole buffer with the partner at distance 1, 2, 4, ... and merge
// it (lower rank's data first, so both partners compute the same bits). Fewest steps; each
// moves the whole buffer, so it suits small messages.
#include "collectives/allreduce/allreduce.h"
#include "collectives/patterns/recursive.h"

namespace tpcomm::coll {

void allreduce_recursive_doubling(CollComm& comm, void* data, size_t count, const Reducer& red,
                                  const ExecParams&) {
  const int rank = comm.rank();
  const size_t bytes = count * red.esize();
  recursive::Fold fold(comm.size());
  enum { kFoldIn = 0, kStep = 1, kFoldOut = 2 };
  if (fold.sits_out(rank)) {
    Request s = comm.isend(data, bytes, rank + 1, kFoldIn);
    comm.wait(s);
    Request rq = comm.irecv(data, bytes, rank + 1, kFoldOut);
    comm.wait(rq);
    return;
  }
  Scratch tmp(bytes);
  if (fold.absorbs(rank)) {
    Request rq = comm.irecv(tmp.data(), bytes, rank - 1, kFoldIn);
    comm.wait(rq);
    red.merge(data, tmp.data(), data, count);
  }
  const int me = fold.new_rank(rank);
  for (int k = 0; (1 << k) < fold.pof2; ++k) {
    int partner = recursive::doubling_partner(me, k);
    int peer = fold.old_rank(partner);
    Request rq = comm.irecv(tmp.data(), bytes, peer, kStep);
    Request sq = comm.isend(data, bytes, peer, kStep);
    comm.wait(rq);
    comm.wait(sq);
    if (me < partner) {
      red.merge(data, data, tmp.data(), count);
    } else {
      red.merge(data, tmp.data(), data, count);
    }
  }
  if (fold.absorbs(rank)) {
    Request s = comm.isend(data, bytes, rank - 1, kFoldOut);
    comm.wait(s);
  }
}

}  // namespace tpcomm::coll
