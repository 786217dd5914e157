// all_reduce: the catalogue and the entry point.
#include "collectives/allreduce/allreduce.h"
#include "collectives/collectives.h"
#include "collectives/select.h"
#include "collectives/validate.h"
#include "core/log.h"

namespace tpcomm::coll {

namespace {

constexpr AlgoInfo kAlgos[] = {
    {0, "ring", "reduce-scatter then all-gather around a ring, pipelined in slices"},
    {1, "tree", "double binary tree: each half reduced up and broadcast down one tree, pipelined"},
    {2, "recursive_doubling", "log2(n) whole-buffer exchanges at distances 1, 2, 4, ...: small"},
    {3, "rabenseifner", "recursive-halving reduce-scatter, recursive-doubling all-gather: medium"},
};
using Fn = void (*)(CollComm&, void*, size_t, const Reducer&, const ExecParams&);
constexpr Fn kFns[] = {allreduce_ring, allreduce_tree, allreduce_recursive_doubling,
                       allreduce_rabenseifner};

}  // namespace

std::span<const AlgoInfo> allreduce_catalogue() { return kAlgos; }

const AlgoInfo& all_reduce(CollComm& comm, const AllReduceArgs& a) {
  const char* op = "all_reduce";
  const int r = comm.rank(), n = comm.size();
  check::tensor(a.input, op, "input", r);
  check::tensor(a.output, op, "output", r);
  check::same_dtype(a.input, "input", a.output, "output", op, r);
  check::numel(a.output, "output", a.input.numel, "the input's element count", op, r);
  check::reduce_op(a.op, a.input.dtype, op, r);
  Reducer red(a.input.dtype, a.op, a.premul_scale);
  ExecParams p = exec_params(a.options, red.esize());
  const AlgoInfo& algo = select_algorithm(CollOp::AllReduce, a.input.nbytes(), n, comm.hints(),
                                          a.options, p.slice_bytes);
  TPLOG(INFO, COLL) << "all_reduce rank " << r << "/" << n << ": " << a.input.str() << " "
                    << reduce_op_name(a.op) << " via " << algo.name;
  const size_t count = static_cast<size_t>(a.input.numel);
  if (count == 0) return algo;
  if (algo.id == 0 && n > 1 && a.input.data != a.output.data && a.op != ReduceOp::PREMUL_SUM) {
    // The ring reads the input where it needs it: no copy of the whole input first.
    allreduce_ring_from(comm, a.input.data, a.output.data, count, red, p);
  } else {
    red.load(a.output.data, a.input.data, count);
    kFns[algo.id](comm, a.output.data, count, red, p);
  }
  red.finish(a.output.data, count, n);
  return algo;
}

}  // namespace tpcomm::coll
