// barrier: the catalogue and the entry point.
#include "collectives/barrier/barrier.h"
#include "collectives/collectives.h"
#include "collectives/select.h"
#include "core/log.h"

namespace tpcomm::coll {

namespace {

constexpr AlgoInfo kAlgos[] = {
    {0, "dissemination", "ceil(log2 n) rounds; in round k signal rank+2^k, wait for rank-2^k"},
};

}  // namespace

std::span<const AlgoInfo> barrier_catalogue() { return kAlgos; }

const AlgoInfo& barrier(CollComm& comm, const BarrierArgs& a) {
  const AlgoInfo& algo =
      select_algorithm(CollOp::Barrier, 0, comm.size(), comm.hints(), a.options, 0);
  TPLOG(INFO, COLL) << "barrier rank " << comm.rank() << "/" << comm.size() << " via " << algo.name;
  barrier_dissemination(comm);
  return algo;
}

}  // namespace tpcomm::coll
