// The dispatch of one collective: fast path hook, then the CollComm algorithms.
#include "pg/coll_dispatch.h"

#include "collectives/collectives.h"
#include "collectives/validate.h"
#include "tpcomm/error.hpp"

namespace tpcomm::detail {
namespace {

// THE HOOK of the intra-host fast path (coll::shm::HostColl, made per group in
// coll_run.cc when every member is on this host and the links are shm): tried first with
// arguments validated as the CollComm entry points do; it declines (false) calls it does not
// handle, e.g. an operation TPCOMM_ALGO or the options force onto another algorithm, and the
// CollComm algorithm runs instead.
void check_all_reduce(const CollContext& c, const coll::AllReduceArgs& a) {
  const char* op = "all_reduce";
  const int r = c.comm.rank();
  coll::check::tensor(a.input, op, "input", r);
  coll::check::tensor(a.output, op, "output", r);
  coll::check::same_dtype(a.input, "input", a.output, "output", op, r);
  coll::check::numel(a.output, "output", a.input.numel, "the input's element count", op, r);
  coll::check::reduce_op(a.op, a.input.dtype, op, r);
}

void check_broadcast(const CollContext& c, const coll::BroadcastArgs& a) {
  const char* op = "broadcast";
  const int r = c.comm.rank();
  coll::check::root(a.root, c.comm.size(), op, r);
  coll::check::tensor(a.tensor, op, "tensor", r);
  if (r == a.root && a.input.data != nullptr && a.input.data != a.tensor.data) {
    coll::check::tensor(a.input, op, "input", r);
    coll::check::same_dtype(a.tensor, "tensor", a.input, "input", op, r);
    coll::check::numel(a.input, "input", a.tensor.numel, "the tensor's element count", op, r);
  }
}

void check_reduce(const CollContext& c, const coll::ReduceArgs& a) {
  const char* op = "reduce";
  const int r = c.comm.rank();
  coll::check::root(a.root, c.comm.size(), op, r);
  coll::check::tensor(a.input, op, "input", r);
  coll::check::reduce_op(a.op, a.input.dtype, op, r);
  if (r == a.root) {
    coll::check::tensor(a.output, op, "output", r);
    coll::check::same_dtype(a.input, "input", a.output, "output", op, r);
    coll::check::numel(a.output, "output", a.input.numel, "the input's element count", op, r);
  }
}

void check_all_gather(const CollContext& c, const coll::AllGatherArgs& a) {
  const char* op = "all_gather";
  const int r = c.comm.rank(), n = c.comm.size();
  coll::check::tensor(a.input, op, "input", r);
  coll::check::tensor(a.output, op, "output", r);
  coll::check::same_dtype(a.input, "input", a.output, "output", op, r);
  coll::check::numel(
      a.output, "output", a.input.numel * n,
      [&] { return "group size " + std::to_string(n) + " x the input's element count"; }, op, r);
}

void check_reduce_scatter(const CollContext& c, const coll::ReduceScatterArgs& a) {
  const char* op = "reduce_scatter";
  const int r = c.comm.rank(), n = c.comm.size();
  coll::check::tensor(a.input, op, "input", r);
  coll::check::tensor(a.output, op, "output", r);
  coll::check::same_dtype(a.input, "input", a.output, "output", op, r);
  coll::check::numel(
      a.input, "input", a.output.numel * n,
      [&] { return "group size " + std::to_string(n) + " x the output's element count"; }, op, r);
  coll::check::reduce_op(a.op, a.input.dtype, op, r);
}

const char* host_name(const CollContext& c) { return c.host->last_algo().name; }

}  // namespace

const char* run_broadcast(CollContext& c, const coll::BroadcastArgs& a) {
  if (c.host) {
    check_broadcast(c, a);
    if (c.host->broadcast(a, c.comm.deadline())) return host_name(c);
  }
  return coll::broadcast(c.comm, a).name;
}

const char* run_all_reduce(CollContext& c, const coll::AllReduceArgs& a) {
  if (c.host) {
    check_all_reduce(c, a);
    if (c.host->all_reduce(a, c.comm.deadline())) return host_name(c);
  }
  return coll::all_reduce(c.comm, a).name;
}

const char* run_reduce(CollContext& c, const coll::ReduceArgs& a) {
  if (c.host) {
    check_reduce(c, a);
    if (c.host->reduce(a, c.comm.deadline())) return host_name(c);
  }
  return coll::reduce(c.comm, a).name;
}

const char* run_all_gather(CollContext& c, const coll::AllGatherArgs& a) {
  if (c.host) {
    check_all_gather(c, a);
    if (c.host->all_gather(a, c.comm.deadline())) return host_name(c);
  }
  return coll::all_gather(c.comm, a).name;
}

const char* run_reduce_scatter(CollContext& c, const coll::ReduceScatterArgs& a) {
  if (c.host) {
    check_reduce_scatter(c, a);
    if (c.host->reduce_scatter(a, c.comm.deadline())) return host_name(c);
  }
  return coll::reduce_scatter(c.comm, a).name;
}

const char* run_barrier(CollContext& c, const coll::BarrierArgs& a) {
  if (c.host && a.options.algorithm.empty() && c.host->barrier(c.comm.deadline()))
    return host_name(c);
  return coll::barrier(c.comm, a).name;
}

void agree_all_to_all_sizes(CollContext& c, const char* op, const std::vector<int64_t>& send_bytes,
                            const std::vector<int64_t>& recv_bytes) {
  const int n = c.comm.size(), r = c.comm.rank();
  std::vector<int64_t> mine = send_bytes, theirs(static_cast<size_t>(n));
  coll::AllToAllArgs x;
  x.input = Tensor::of(mine);
  x.output = Tensor::of(theirs);
  coll::all_to_all(c.comm, x);
  std::string err;
  for (int j = 0; j < n && err.empty(); ++j) {
    if (theirs[j] != recv_bytes[j])
      err = "rank " + std::to_string(j) + " sends " + std::to_string(theirs[j]) +
            " bytes to rank " + std::to_string(r) + ", which expects " +
            std::to_string(recv_bytes[j]) + " bytes from it";
  }
  int64_t first = err.empty() ? n : r;
  coll::all_reduce(c.comm, {Tensor::of(&first, 1), Tensor::of(&first, 1), ReduceOp::MIN});
  if (first == n) return;
  c.clean_failure = true;
  throw MismatchError(std::string(op) + " (rank " + std::to_string(r) + "): " +
                      (err.empty() ? "rank " + std::to_string(first) +
                                         " found split sizes that disagree with its peers'"
                                   : err) +
                      "; no data was exchanged. Each rank's output split size for rank j must "
                      "equal rank j's input split size for it");
}

}  // namespace tpcomm::detail
