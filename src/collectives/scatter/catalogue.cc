// scatter: the catalogue and the entry point.
#include "collectives/collectives.h"
#include "collectives/scatter/scatter.h"
#include "collectives/select.h"
#include "collectives/validate.h"
#include "core/log.h"

namespace tpcomm::coll {

namespace {

constexpr AlgoInfo kAlgos[] = {
    {0, "binomial", "binomial tree: each rank passes its subtree's blocks down; small"},
    {1, "linear", "the root sends each rank its block directly: large messages"},
};
using Fn = void (*)(CollComm&, const void*, void*, size_t, int, const ExecParams&);
constexpr Fn kFns[] = {scatter_binomial, scatter_linear};

}  // namespace

std::span<const AlgoInfo> scatter_catalogue() { return kAlgos; }

const AlgoInfo& scatter(CollComm& comm, const ScatterArgs& a) {
  const char* op = "scatter";
  const int r = comm.rank(), n = comm.size();
  check::root(a.root, n, op, r);
  check::tensor(a.output, op, "output", r);
  if (r == a.root) {
    check::tensor(a.input, op, "input", r);
    check::same_dtype(a.output, "output", a.input, "input", op, r);
    check::numel_group(a.input, "input", a.output.numel, "output", n, op, r);
  }
  ExecParams p = exec_params(a.options, a.output.element_size());
  const AlgoInfo& algo = select_algorithm(CollOp::Scatter, a.output.nbytes() * n, n, comm.hints(),
                                          a.options, p.slice_bytes);
  TPLOG(INFO, COLL) << "scatter rank " << r << "/" << n << ": " << a.output.str() << " root "
                    << a.root << " via " << algo.name;
  if (a.output.numel == 0) return algo;
  kFns[algo.id](comm, r == a.root ? a.input.data : nullptr, a.output.data, a.output.nbytes(),
                a.root, p);
  return algo;
}

}  // namespace tpcomm::coll
