// all_gather: the catalogue and the entry point (all_gather_into_tensor).
#include "collectives/allgather/allgather.h"
#include "collectives/collectives.h"
#include "collectives/select.h"
#include "collectives/validate.h"
#include "core/log.h"

namespace tpcomm::coll {

namespace {

constexpr AlgoInfo kAlgos[] = {
    {0, "ring", "n-1 steps passing each block around a ring, pipelined in slices: large"},
    {1, "bruck", "Bruck: ceil(log2 n) steps doubling the blocks held, then one rotation: small"},
};
using Fn = void (*)(CollComm&, const void*, void*, size_t, const ExecParams&);
constexpr Fn kFns[] = {allgather_ring, allgather_bruck};

}  // namespace

std::span<const AlgoInfo> allgather_catalogue() { return kAlgos; }

const AlgoInfo& all_gather(CollComm& comm, const AllGatherArgs& a) {
  const char* op = "all_gather";
  const int r = comm.rank(), n = comm.size();
  check::tensor(a.input, op, "input", r);
  check::tensor(a.output, op, "output", r);
  check::same_dtype(a.input, "input", a.output, "output", op, r);
  check::numel_group(a.output, "output", a.input.numel, "input", n, op, r);
  ExecParams p = exec_params(a.options, a.input.element_size());
  const AlgoInfo& algo = select_algorithm(CollOp::AllGather, a.output.nbytes(), n, comm.hints(),
                                          a.options, p.slice_bytes);
  TPLOG(INFO, COLL) << "all_gather rank " << r << "/" << n << ": " << a.input.str() << " via "
                    << algo.name;
  if (a.input.numel == 0) return algo;
  kFns[algo.id](comm, a.input.data, a.output.data, a.input.nbytes(), p);
  return algo;
}

}  // namespace tpcomm::coll
