// broadcast: the catalogue and the entry point.
#include <cstring>

#include "collectives/broadcast/broadcast.h"
#include "collectives/collectives.h"
#include "collectives/select.h"
#include "collectives/validate.h"
#include "core/log.h"

namespace tpcomm::coll {

namespace {

constexpr AlgoInfo kAlgos[] = {
    {0, "binomial", "binomial tree from the root, whole message per hop: log2(n) steps, small"},
    {1, "ring", "pipelined chain from the root through every rank in slices: large messages"},
    {2, "tree", "double binary tree rooted at the root, half the data down each, pipelined"},
};
using Fn = void (*)(CollComm&, void*, size_t, int, const ExecParams&);
constexpr Fn kFns[] = {broadcast_binomial, broadcast_ring, broadcast_tree};

}  // namespace

std::span<const AlgoInfo> broadcast_catalogue() { return kAlgos; }

const AlgoInfo& broadcast(CollComm& comm, const BroadcastArgs& a) {
  const char* op = "broadcast";
  const int r = comm.rank(), n = comm.size();
  check::root(a.root, n, op, r);
  check::tensor(a.tensor, op, "tensor", r);
  const bool separate = r == a.root && a.input.data != nullptr && a.input.data != a.tensor.data;
  if (separate) {
    check::tensor(a.input, op, "input", r);
    check::same_dtype(a.tensor, "tensor", a.input, "input", op, r);
    check::numel(a.input, "input", a.tensor.numel, "the tensor's element count", op, r);
  }
  ExecParams p = exec_params(a.options, 1);
  const AlgoInfo& algo = select_algorithm(CollOp::Broadcast, a.tensor.nbytes(), n, comm.hints(),
                                          a.options, p.slice_bytes);
  TPLOG(INFO, COLL) << "broadcast rank " << r << "/" << n << ": " << a.tensor.str() << " root "
                    << a.root << " via " << algo.name;
  if (a.tensor.numel == 0) return algo;
  if (separate) std::memcpy(a.tensor.data, a.input.data, a.tensor.nbytes());
  kFns[algo.id](comm, a.tensor.data, a.tensor.nbytes(), a.root, p);
  return algo;
}

}  // namespace tpcomm::coll
