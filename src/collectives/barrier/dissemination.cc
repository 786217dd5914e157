// barrier dissemination (Hensgen, Finkel and Manber): in round k each rank signals rank + 2^k
// and waits for rank - 2^k; after ceil(log2 n) rounds every rank has heard, directly or
// through others, from every rank. Works for any n with no fold.
#include <cstdint>

#include "collectives/barrier/barrier.h"
#include "collectives/patterns/schedules.h"

namespace tpcomm::coll {

void barrier_dissemination(CollComm& comm) {
  uint8_t token = 1, sink = 0;
  int round = 0;
  for (const schedule::Exchange& e : schedule::dissemination(comm.size(), comm.rank())) {
    Request rq = comm.irecv(&sink, 1, e.from, round);
    Request sq = comm.isend(&token, 1, e.to, round);
    comm.wait(rq);
    comm.wait(sq);
    ++round;
  }
}

}  // namespace tpcomm::coll
