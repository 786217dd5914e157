// all_reduce ring: a pipelined ring reduce-scatter leaves rank r with the reduced block r,
// then a pipelined ring all-gather hands every block to every rank. Each rank sends and
// receives 2 (n-1)/n of the buffer: bandwidth-optimal, 2 (n-1) latency steps.
#include "collectives/allreduce/allreduce.h"
#include "collectives/ring_phases.h"

namespace tpcomm::coll {

void allreduce_ring(CollComm& comm, void* data, size_t count, const Reducer& red,
                    const ExecParams& params) {
  ring_reduce_scatter_inplace(comm, data, count, red, params, /*tag=*/0);
  ring_all_gather_inplace(comm, data, count, red.esize(), params, /*tag=*/1);
}

void allreduce_ring_from(CollComm& comm, const void* input, void* data, size_t count,
                         const Reducer& red, const ExecParams& params) {
  ring_reduce_scatter_inplace(comm, data, count, red, params, /*tag=*/0, input);
  ring_all_gather_inplace(comm, data, count, red.esize(), params, /*tag=*/1);
}

}  // namespace tpcomm::coll
