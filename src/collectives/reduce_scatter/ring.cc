// reduce_scatter ring: the pipelined ring reduce-scatter pass (ring_phases.h) leaves rank r
// with the merged block r. n-1 steps; each rank sends (n-1)/n of the input: large messages.
#include <cstring>

#include "collectives/reduce_scatter/reduce_scatter.h"
#include "collectives/ring_phases.h"

namespace tpcomm::coll {

void reduce_scatter_ring(CollComm& comm, void* work, void* output, size_t count, const Reducer& red,
                         const ExecParams& params) {
  const size_t n = static_cast<size_t>(comm.size());
  ring_reduce_scatter_inplace(comm, work, n * count, red, params, 0);
  std::memcpy(output, at(work, static_cast<size_t>(comm.rank()) * count * red.esize()),
              count * red.esize());
}

}  // namespace tpcomm::coll
