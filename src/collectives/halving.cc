// Recursive halving and doubling steps (see halving.h).
#include "collectives/halving.h"

namespace tpcomm::coll {

void halving_reduce_scatter(CollComm& comm, void* data, const recursive::Fold& fold, int new_rank,
                            const GroupRange& range, const Reducer& red, uint8_t* tmp, int tag) {
  const size_t es = red.esize();
  for (const recursive::Step& s : recursive::halving_steps(fold.pof2, new_rank)) {
    ring::Range keep = range(s.keep_lo, s.keep_hi), give = range(s.give_lo, s.give_hi);
    int peer = fold.old_rank(s.partner);
    Request rq = comm.irecv(tmp, keep.count * es, peer, tag);
    Request sq = comm.isend(at(data, give.offset * es), give.count * es, peer, tag);
    comm.wait(rq);
    red.merge(at(data, keep.offset * es), at(data, keep.offset * es), tmp, keep.count);
    comm.wait(sq);
  }
}

void doubling_all_gather(CollComm& comm, void* data, const recursive::Fold& fold, int new_rank,
                         const GroupRange& range, size_t esize, int tag) {
  for (const recursive::Step& s : recursive::doubling_steps(fold.pof2, new_rank)) {
    ring::Range have = range(s.keep_lo, s.keep_hi), get = range(s.give_lo, s.give_hi);
    int peer = fold.old_rank(s.partner);
    Request rq = comm.irecv(at(data, get.offset * esize), get.count * esize, peer, tag);
    Request sq = comm.isend(at(data, have.offset * esize), have.count * esize, peer, tag);
    comm.wait(rq);
    comm.wait(sq);
  }
}

}  // namespace tpcomm::coll
