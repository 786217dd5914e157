// gather: the catalogue and the entry point.
#include "collectives/collectives.h"
#include "collectives/gather/gather.h"
#include "collectives/select.h"
#include "collectives/validate.h"
#include "core/log.h"

namespace tpcomm::coll {

namespace {

constexpr AlgoInfo kAlgos[] = {
    {0, "binomial", "binomial tree: subtrees collect their blocks and pass them up; small"},
    {1, "linear", "every rank sends its block straight to the root: large messages"},
};
using Fn = void (*)(CollComm&, const void*, void*, size_t, int, const ExecParams&);
constexpr Fn kFns[] = {gather_binomial, gather_linear};

}  // namespace

std::span<const AlgoInfo> gather_catalogue() { return kAlgos; }

const AlgoInfo& gather(CollComm& comm, const GatherArgs& a) {
  const char* op = "gather";
  const int r = comm.rank(), n = comm.size();
  check::root(a.root, n, op, r);
  check::tensor(a.input, op, "input", r);
  if (r == a.root) {
    check::tensor(a.output, op, "output", r);
    check::same_dtype(a.input, "input", a.output, "output", op, r);
    check::numel_group(a.output, "output", a.input.numel, "input", n, op, r);
  }
  ExecParams p = exec_params(a.options, a.input.element_size());
  const AlgoInfo& algo = select_algorithm(CollOp::Gather, a.input.nbytes() * n, n, comm.hints(),
                                          a.options, p.slice_bytes);
  TPLOG(INFO, COLL) << "gather rank " << r << "/" << n << ": " << a.input.str() << " root "
                    << a.root << " via " << algo.name;
  if (a.input.numel == 0) return algo;
  kFns[algo.id](comm, a.input.data, r == a.root ? a.output.data : nullptr, a.input.nbytes(), a.root,
                p);
  return algo;
}

}  // namespace tpcomm::coll
