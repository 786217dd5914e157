// all_to_all linear: every receive and send posted at once, then waited. One round of
// latency, but every rank talks to all others at the same time: small messages.
#include <cstring>
#include <vector>

#include "collectives/alltoall/alltoall.h"
#include "collectives/patterns/schedules.h"
#include "tpcomm/error.hpp"

namespace tpcomm::coll {

void alltoall_linear(CollComm& comm, const void* input, void* output, const Layout& send,
                     const Layout& recv, const ExecParams&) {
  const size_t r = static_cast<size_t>(comm.rank());
  if (recv[r].count != send[r].count) {
    throw MismatchError("all_to_all (rank " + std::to_string(r) + "): sends itself " +
                        std::to_string(send[r].count) + " bytes but expects " +
                        std::to_string(recv[r].count) + "; the split sizes disagree");
  }
  std::vector<Request> reqs;
  auto steps = schedule::pairwise(comm.size(), comm.rank());
  for (const schedule::Exchange& e : steps) {
    const ring::Range& out = recv[static_cast<size_t>(e.from)];
    reqs.push_back(comm.irecv(at(output, out.offset), out.count, e.from, 0));
  }
  for (const schedule::Exchange& e : steps) {
    const ring::Range& in = send[static_cast<size_t>(e.to)];
    reqs.push_back(comm.isend(at(input, in.offset), in.count, e.to, 0));
  }
  if (send[r].count > 0)
    std::memcpy(at(output, recv[r].offset), at(input, send[r].offset), send[r].count);
  comm.wait_all(reqs);
}

}  // namespace tpcomm::coll
