// all_to_all: the catalogue and the entry point (all_to_all_single, even or with splits).
#include <cstring>

#include "collectives/alltoall/alltoall.h"
#include "collectives/collectives.h"
#include "collectives/select.h"
#include "collectives/validate.h"
#include "core/log.h"
#include "tpcomm/error.hpp"

namespace tpcomm::coll {

namespace {

constexpr AlgoInfo kAlgos[] = {
    {0, "pairwise", "n-1 steps; at step s send to rank+s and receive from rank-s: large"},
    {1, "linear", "post every receive and send at once: small messages, few ranks"},
};
using Fn = void (*)(CollComm&, const void*, void*, const Layout&, const Layout&, const ExecParams&);
constexpr Fn kFns[] = {alltoall_pairwise, alltoall_linear};

Layout layout(const std::vector<int64_t>& splits, int64_t numel, int n, size_t esize) {
  Layout l(static_cast<size_t>(n));
  size_t off = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    size_t c = splits.empty() ? static_cast<size_t>(numel / n) : static_cast<size_t>(splits[i]);
    l[i] = {off * esize, c * esize};
    off += c;
  }
  return l;
}

}  // namespace

std::span<const AlgoInfo> alltoall_catalogue() { return kAlgos; }

const AlgoInfo& all_to_all(CollComm& comm, const AllToAllArgs& a) {
  const char* op = "all_to_all";
  const int r = comm.rank(), n = comm.size();
  check::tensor(a.input, op, "input", r);
  check::tensor(a.output, op, "output", r);
  check::same_dtype(a.input, "input", a.output, "output", op, r);
  const bool even = a.input_splits.empty() && a.output_splits.empty();
  if (even) {
    if (a.input.numel % n != 0) {
      throw InvalidArgument("all_to_all (rank " + std::to_string(r) + "): input has " +
                            std::to_string(a.input.numel) +
                            " elements, not divisible by the group size " + std::to_string(n) +
                            "; pass split sizes for uneven blocks");
    }
    check::numel(a.output, "output", a.input.numel, "the input's element count (even split)", op,
                 r);
  } else {
    if (a.input_splits.empty() && a.input.numel % n != 0) {
      throw InvalidArgument("all_to_all (rank " + std::to_string(r) + "): input has " +
                            std::to_string(a.input.numel) +
                            " elements, not divisible by the group size " + std::to_string(n) +
                            "; pass input split sizes");
    }
    if (a.output_splits.empty() && a.output.numel % n != 0) {
      throw InvalidArgument("all_to_all (rank " + std::to_string(r) + "): output has " +
                            std::to_string(a.output.numel) +
                            " elements, not divisible by the group size " + std::to_string(n) +
                            "; pass output split sizes");
    }
    if (!a.input_splits.empty()) {
      check::splits(a.input_splits, "input split sizes", n, a.input.numel, op, r);
    }
    if (!a.output_splits.empty()) {
      check::splits(a.output_splits, "output split sizes", n, a.output.numel, op, r);
    }
  }
  const size_t es = a.input.element_size();
  ExecParams p = exec_params(a.options, es);
  // Uneven splits differ between ranks, so only the group size may drive the choice there.
  const uint64_t bytes = even ? a.input.nbytes() : UINT64_MAX / 4;
  const AlgoInfo& algo =
      select_algorithm(CollOp::AllToAll, bytes, n, comm.hints(), a.options, p.slice_bytes);
  TPLOG(INFO, COLL) << "all_to_all rank " << r << "/" << n << ": " << a.input.str() << " via "
                    << algo.name;
  if (even && a.input.numel == 0) return algo;
  Layout send = layout(a.input_splits, a.input.numel, n, es);
  Layout recv = layout(a.output_splits, a.output.numel, n, es);
  // In place: send from a copy of the input.
  Scratch copy(a.input.data == a.output.data ? a.input.nbytes() : 0);
  const void* in = a.input.data;
  if (copy.size() > 0) {
    std::memcpy(copy.data(), a.input.data, copy.size());
    in = copy.data();
  }
  kFns[algo.id](comm, in, a.output.data, send, recv, p);
  return algo;
}

}  // namespace tpcomm::coll
