// reduce: the catalogue and the entry point.
#include "collectives/collectives.h"
#include "collectives/reduce/reduce.h"
#include "collectives/select.h"
#include "collectives/validate.h"
#include "core/log.h"

namespace tpcomm::coll {

namespace {

constexpr AlgoInfo kAlgos[] = {
    {0, "binomial", "binomial tree towards the root, whole message per hop: small messages"},
    {1, "tree", "double binary tree rooted at the root, half the data up each, pipelined"},
};
using Fn = void (*)(CollComm&, void*, size_t, int, const Reducer&, const ExecParams&);
constexpr Fn kFns[] = {reduce_binomial, reduce_tree};

}  // namespace

std::span<const AlgoInfo> reduce_catalogue() { return kAlgos; }

const AlgoInfo& reduce(CollComm& comm, const ReduceArgs& a) {
  const char* op = "reduce";
  const int r = comm.rank(), n = comm.size();
  check::root(a.root, n, op, r);
  check::tensor(a.input, op, "input", r);
  check::reduce_op(a.op, a.input.dtype, op, r);
  const bool is_root = r == a.root;
  if (is_root) {
    check::tensor(a.output, op, "output", r);
    check::same_dtype(a.input, "input", a.output, "output", op, r);
    check::numel(a.output, "output", a.input.numel, "the input's element count", op, r);
  }
  Reducer red(a.input.dtype, a.op, a.premul_scale);
  ExecParams p = exec_params(a.options, red.esize());
  const AlgoInfo& algo =
      select_algorithm(CollOp::Reduce, a.input.nbytes(), n, comm.hints(), a.options, p.slice_bytes);
  TPLOG(INFO, COLL) << "reduce rank " << r << "/" << n << ": " << a.input.str() << " "
                    << reduce_op_name(a.op) << " root " << a.root << " via " << algo.name;
  const size_t count = static_cast<size_t>(a.input.numel);
  if (count == 0) return algo;
  // The root accumulates in its output; the others in scratch (their input stays intact).
  Scratch scratch(is_root ? 0 : a.input.nbytes());
  void* work = is_root ? a.output.data : scratch.data();
  red.load(work, a.input.data, count);
  kFns[algo.id](comm, work, count, a.root, red, p);
  if (is_root) red.finish(work, count, n);
  return algo;
}

}  // namespace tpcomm::coll
