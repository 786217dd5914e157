// all_gather ring: each rank's block travels n-1 hops around the ring, forwarded slice by
// slice as it arrives. Every rank sends and receives (n-1)/n of the output: large messages.
#include <cstring>

#include "collectives/allgather/allgather.h"
#include "collectives/ring_phases.h"

namespace tpcomm::coll {

void allgather_ring(CollComm& comm, const void* input, void* output, size_t block,
                    const ExecParams& params) {
  const int n = comm.size(), r = comm.rank();
  void* mine = at(output, static_cast<size_t>(r) * block);
  if (mine != input) std::memcpy(mine, input, block);
  // Byte elements: ring blocks are then exactly `block` bytes each.
  ring_all_gather_inplace(comm, output, static_cast<size_t>(n) * block, 1, params, 0);
}

}  // namespace tpcomm::coll
