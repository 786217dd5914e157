// CollBenchComm: tpbench's calls mapped onto the host collectives.
#include "bench/bench_comm.h"

#include <cstring>
#include <string_view>

#include "collectives/collectives.h"
#include "collectives/util.h"
#include "tpcomm/error.hpp"

namespace tpcomm::bench {

namespace {

Tensor view(void* p, size_t elems, DType dt, size_t offset_elems = 0) {
  return Tensor::raw(coll::at(p, offset_elems * dtype_size(dt)), static_cast<int64_t>(elems), dt);
}

}  // namespace

const char* CollBenchComm::run(const BenchCall& c) {
  const std::string_view name = c.op->name;
  const size_t p = c.shape.param;
  const int r = rank(), n = size();
  coll::CommonOptions o;
  o.algorithm = c.algorithm;
  o.slice_bytes = c.slice_bytes;
  if (name == "allreduce") {
    Tensor out = view(c.recv, p, c.dtype);
    return coll::all_reduce(comm_, {c.in_place ? out : view(c.send, p, c.dtype), out, c.redop,
                                    c.premul_scale, o})
        .name;
  }
  if (name == "broadcast") {
    coll::BroadcastArgs a{view(c.recv, p, c.dtype), Tensor{}, c.root, o};
    if (!c.in_place && r == c.root) a.input = view(c.send, p, c.dtype);
    return coll::broadcast(comm_, a).name;
  }
  if (name == "reduce") {
    Tensor out = view(c.recv, p, c.dtype);
    return coll::reduce(comm_, {c.in_place ? out : view(c.send, p, c.dtype), out, c.root, c.redop,
                                c.premul_scale, o})
        .name;
  }
  if (name == "allgather") {
    Tensor out = view(c.recv, p * static_cast<size_t>(n), c.dtype);
    Tensor in = c.in_place ? view(c.recv, p, c.dtype, p * static_cast<size_t>(r))
                           : view(c.send, p, c.dtype);
    return coll::all_gather(comm_, {in, out, o}).name;
  }
  if (name == "reducescatter") {
    Tensor in = view(c.send, p * static_cast<size_t>(n), c.dtype);
    Tensor out = c.in_place ? view(c.send, p, c.dtype, p * static_cast<size_t>(r))
                            : view(c.recv, p, c.dtype);
    return coll::reduce_scatter(comm_, {in, out, c.redop, c.premul_scale, o}).name;
  }
  if (name == "alltoall") {
    coll::AllToAllArgs a;
    a.input = view(c.send, p * static_cast<size_t>(n), c.dtype);
    a.output = view(c.recv, p * static_cast<size_t>(n), c.dtype);
    a.options = o;
    return coll::all_to_all(comm_, a).name;
  }
  if (name == "gather") {
    return coll::gather(comm_,
                        {view(c.send, p, c.dtype),
                         r == c.root ? view(c.recv, p * static_cast<size_t>(n), c.dtype) : Tensor{},
                         c.root, o})
        .name;
  }
  if (name == "scatter") {
    return coll::scatter(
               comm_, {r == c.root ? view(c.send, p * static_cast<size_t>(n), c.dtype) : Tensor{},
                       view(c.recv, p, c.dtype), c.root, o})
        .name;
  }
  if (name == "sendrecv") {
    const size_t bytes = p * dtype_size(c.dtype);
    if (n == 1) {
      if (bytes) std::memcpy(c.recv, c.send, bytes);
      return "p2p";
    }
    coll::Request rq = comm_.irecv(c.recv, bytes, (r - 1 + n) % n, 0);
    coll::Request sq = comm_.isend(c.send, bytes, (r + 1) % n, 0);
    comm_.wait(rq);
    comm_.wait(sq);
    return "p2p";
  }
  throw InvalidArgument("tpbench: no such operation '" + std::string(name) + "'");
}

void CollBenchComm::barrier() { coll::barrier(comm_); }

double CollBenchComm::max(double v) {
  double out = v;
  coll::all_reduce(comm_, {Tensor::of(&out, 1), Tensor::of(&out, 1), ReduceOp::MAX});
  return out;
}

int64_t CollBenchComm::sum(int64_t v) {
  int64_t out = v;
  coll::all_reduce(comm_, {Tensor::of(&out, 1), Tensor::of(&out, 1), ReduceOp::SUM});
  return out;
}

}  // namespace tpcomm::bench
