// reduce_scatter: the catalogue and the entry point (reduce_scatter_tensor).
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/reduce_scatter/reduce_scatter.h"
#include "collectives/select.h"
#include "collectives/validate.h"
#include "core/log.h"

namespace tpcomm::coll {

namespace {

constexpr AlgoInfo kAlgos[] = {
    {0, "ring", "n-1 steps around a ring, each merging a slice and forwarding it, pipelined"},
    {1, "recursive_halving", "log2(n) steps exchanging halves of the remaining range: small"},
};
using Fn = void (*)(CollComm&, void*, void*, size_t, const Reducer&, const ExecParams&);
constexpr Fn kFns[] = {reduce_scatter_ring, reduce_scatter_recursive_halving};

}  // namespace

std::span<const AlgoInfo> reduce_scatter_catalogue() { return kAlgos; }

const AlgoInfo& reduce_scatter(CollComm& comm, const ReduceScatterArgs& a) {
  const char* op = "reduce_scatter";
  const int r = comm.rank(), n = comm.size();
  check::tensor(a.input, op, "input", r);
  check::tensor(a.output, op, "output", r);
  check::same_dtype(a.input, "input", a.output, "output", op, r);
  check::numel_group(a.input, "input", a.output.numel, "output", n, op, r);
  check::reduce_op(a.op, a.input.dtype, op, r);
  Reducer red(a.input.dtype, a.op, a.premul_scale);
  ExecParams p = exec_params(a.options, red.esize());
  const AlgoInfo& algo = select_algorithm(CollOp::ReduceScatter, a.input.nbytes(), n, comm.hints(),
                                          a.options, p.slice_bytes);
  TPLOG(INFO, COLL) << "reduce_scatter rank " << r << "/" << n << ": " << a.input.str() << " "
                    << reduce_op_name(a.op) << " via " << algo.name;
  const size_t count = static_cast<size_t>(a.output.numel);
  if (count == 0) return algo;
  // The algorithms reduce in a scratch copy, leaving the input intact.
  Scratch work(a.input.nbytes());
  red.load(work.data(), a.input.data, count * static_cast<size_t>(n));
  kFns[algo.id](comm, work.data(), a.output.data, count, red, p);
  red.finish(a.output.data, count, n);
  return algo;
}

}  // namespace tpcomm::coll
