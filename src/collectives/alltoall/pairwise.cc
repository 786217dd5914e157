// all_to_all pairwise: n-1 steps; at step s a rank sends its block for rank + s and receives
// the block from rank - s, so each step is a permutation and no rank is flooded. Large
// messages.
#include <cstring>

#include "collectives/alltoall/alltoall.h"
#include "collectives/patterns/schedules.h"
#include "tpcomm/error.hpp"

namespace tpcomm::coll {

void alltoall_pairwise(CollComm& comm, const void* input, void* output, const Layout& send,
                       const Layout& recv, const ExecParams&) {
  const size_t r = static_cast<size_t>(comm.rank());
  if (recv[r].count != send[r].count) {
    throw MismatchError("all_to_all (rank " + std::to_string(r) + "): sends itself " +
                        std::to_string(send[r].count) + " bytes but expects " +
                        std::to_string(recv[r].count) + "; the split sizes disagree");
  }
  if (send[r].count > 0)
    std::memcpy(at(output, recv[r].offset), at(input, send[r].offset), send[r].count);
  for (const schedule::Exchange& e : schedule::pairwise(comm.size(), comm.rank())) {
    const ring::Range& in = send[static_cast<size_t>(e.to)];
    const ring::Range& out = recv[static_cast<size_t>(e.from)];
    Request rq = comm.irecv(at(output, out.offset), out.count, e.from, 0);
    Request sq = comm.isend(at(input, in.offset), in.count, e.to, 0);
    comm.wait(rq);
    comm.wait(sq);
  }
}

}  // namespace tpcomm::coll
