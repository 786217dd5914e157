// tpbench under a launcher: a BenchComm over a ProcessGroup made from env:// (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as tprun sets them), its backend from `-t`. Each
// timed call runs as one collective of the group (the same path as ProcessGroup's methods,
// fast-path hook included); `sendrecv` uses the group's point-to-point.
#include <cstring>

#include "bench/bench_comm.h"
#include "collectives/collectives.h"
#include "collectives/util.h"
#include "core/config.h"
#include "cuda/device_buffer.h"
#include "pg/coll_dispatch.h"
#include "pg/coll_run.h"
#include "tpcomm/error.hpp"
#include "tpcomm/rendezvous.hpp"

namespace tpcomm::detail {
namespace {

Tensor view(void* p, size_t elems, DType dt, size_t offset_elems = 0) {
  return Tensor::raw(coll::at(p, offset_elems * dtype_size(dt)), static_cast<int64_t>(elems), dt);
}

class PgBenchComm : public bench::BenchComm {
 public:
  explicit PgBenchComm(std::shared_ptr<ProcessGroup> pg) : pg_(std::move(pg)) {}
  ~PgBenchComm() override { pg_->destroy(); }

  int rank() const override { return pg_->rank(); }
  int size() const override { return pg_->size(); }
  std::string transport() const override {
    if (size() == 1) return "self";
    return pg_->state().world->engine->transport_for(pg_->backend(), (rank() + 1) % size());
  }

  const char* run(const bench::BenchCall& c) override {
    if (c.device.type == DeviceType::CUDA) return run_cuda(c);
    if (!c.op->coll) return sendrecv(c);
    // Reused: no string copy per call.
    if (po_.algorithm != c.algorithm) po_.algorithm = c.algorithm;
    if (co_.algorithm != c.algorithm) co_.algorithm = c.algorithm;
    co_.slice_bytes = c.slice_bytes;
    if (*c.op->coll == coll::CollOp::AllReduce) {
      // ProcessGroup::all_reduce's fast lane first, as a call of the method takes it.
      Tensor out = view(c.recv, c.shape.param, c.dtype);
      const Tensor in = c.in_place ? out : view(c.send, c.shape.param, c.dtype);
      if (const char* a = run_tiny_all_reduce(pg_->state(), c.op->api, in, out, c.redop, po_))
        return a;
    }
    const char* algo = "";
    run_blocking(pg_->state(), c.op->api, po_, [&](CollContext& x) {
      const char* a = one(x, c);
      algo = a ? a : "";
      return a;
    });
    return algo;
  }

  void barrier() override { pg_->barrier(); }
  double max(double v) override {
    pg_->all_reduce(Tensor::of(&v, 1), ReduceOp::MAX);
    return v;
  }
  int64_t sum(int64_t v) override {
    pg_->all_reduce(Tensor::of(&v, 1), ReduceOp::SUM);
    return v;
  }

 private:
  CollectiveOptions po_;
  coll::CommonOptions co_;
  // The call on the collective's communicator (buffer layouts as bench_runner.cc's).
  const char* one(CollContext& x, const bench::BenchCall& c) {
    const size_t p = c.shape.param, n = static_cast<size_t>(size());
    const int r = rank();
    const coll::CommonOptions& o = co_;
    switch (*c.op->coll) {
      case coll::CollOp::AllReduce: {
        Tensor out = view(c.recv, p, c.dtype);
        return run_all_reduce(
            x, {c.in_place ? out : view(c.send, p, c.dtype), out, c.redop, c.premul_scale, o});
      }
      case coll::CollOp::Broadcast: {
        coll::BroadcastArgs a{view(c.recv, p, c.dtype), Tensor{}, c.root, o};
        if (!c.in_place && r == c.root) a.input = view(c.send, p, c.dtype);
        return run_broadcast(x, a);
      }
      case coll::CollOp::Reduce: {
        Tensor out = view(c.recv, p, c.dtype);
        return run_reduce(x, {c.in_place ? out : view(c.send, p, c.dtype), out, c.root, c.redop,
                              c.premul_scale, o});
      }
      case coll::CollOp::AllGather: {
        Tensor in = c.in_place ? view(c.recv, p, c.dtype, p * static_cast<size_t>(r))
                               : view(c.send, p, c.dtype);
        return run_all_gather(x, {in, view(c.recv, p * n, c.dtype), o});
      }
      case coll::CollOp::ReduceScatter: {
        Tensor out = c.in_place ? view(c.send, p, c.dtype, p * static_cast<size_t>(r))
                                : view(c.recv, p, c.dtype);
        return run_reduce_scatter(x,
                                  {view(c.send, p * n, c.dtype), out, c.redop, c.premul_scale, o});
      }
      case coll::CollOp::AllToAll: {
        coll::AllToAllArgs a;
        a.input = view(c.send, p * n, c.dtype);
        a.output = view(c.recv, p * n, c.dtype);
        a.options = o;
        return coll::all_to_all(x.comm, a).name;
      }
      case coll::CollOp::Gather:
        return coll::gather(x.comm,
                            {view(c.send, p, c.dtype),
                             r == c.root ? view(c.recv, p * n, c.dtype) : Tensor{}, c.root, o})
            .name;
      case coll::CollOp::Scatter:
        return coll::scatter(x.comm, {r == c.root ? view(c.send, p * n, c.dtype) : Tensor{},
                                      view(c.recv, p, c.dtype), c.root, o})
            .name;
      default:
        break;
    }
    throw InvalidArgument("tpbench: no such operation '" + std::string(c.op->name) + "'");
  }

  // --device cuda: the call through ProcessGroup's methods on CUDA tensors (staged through
  // pinned host memory, cuda_staging.h). Out of place, the data is first copied on the GPU from
  // the send buffer to where the in-place method works (the time includes that copy).
  const char* run_cuda(const bench::BenchCall& c) {
    const size_t p = c.shape.param, n = static_cast<size_t>(size()), es = dtype_size(c.dtype);
    const int r = rank(), gpu = c.device.index;
    auto v = [&](void* base, size_t elems, size_t offset_elems = 0) {
      return Tensor::raw(coll::at(base, offset_elems * es), static_cast<int64_t>(elems), c.dtype,
                         c.device);
    };
    auto blocks = [&](void* base) {
      std::vector<Tensor> list;
      for (size_t j = 0; j < n; ++j) list.push_back(v(base, p, j * p));
      return list;
    };
    if (po_.algorithm != c.algorithm) po_.algorithm = c.algorithm;
    po_.premul_scale = c.premul_scale;
    if (!c.op->coll) {
      if (n == 1) {
        cuda::device_copy(c.recv, c.send, p * es, gpu);
      } else {
        auto rw = pg_->irecv(v(c.recv, p), (r - 1 + size()) % size(), 0);
        auto sw = pg_->isend(v(c.send, p), (r + 1) % size(), 0);
        rw->wait();
        sw->wait();
      }
      return "p2p staged";
    }
    switch (*c.op->coll) {
      case coll::CollOp::AllReduce:
        if (!c.in_place) cuda::device_copy(c.recv, c.send, p * es, gpu);
        pg_->all_reduce(v(c.recv, p), c.redop, po_);
        break;
      case coll::CollOp::Broadcast:
        if (!c.in_place && r == c.root) cuda::device_copy(c.recv, c.send, p * es, gpu);
        pg_->broadcast(v(c.recv, p), c.root, po_);
        break;
      case coll::CollOp::Reduce:
        if (!c.in_place) cuda::device_copy(c.recv, c.send, p * es, gpu);
        pg_->reduce(v(c.recv, p), c.root, c.redop, po_);
        break;
      case coll::CollOp::AllGather:
        pg_->all_gather_into_tensor(v(c.recv, p * n),
                                    c.in_place ? v(c.recv, p, p * r) : v(c.send, p), po_);
        break;
      case coll::CollOp::ReduceScatter:
        pg_->reduce_scatter_tensor(c.in_place ? v(c.send, p, p * r) : v(c.recv, p),
                                   v(c.send, p * n), c.redop, po_);
        break;
      case coll::CollOp::AllToAll:
        pg_->all_to_all_single(v(c.recv, p * n), v(c.send, p * n), {}, {}, po_);
        break;
      case coll::CollOp::Gather:
        pg_->gather(v(c.send, p), r == c.root ? blocks(c.recv) : std::vector<Tensor>{}, c.root,
                    po_);
        break;
      case coll::CollOp::Scatter:
        pg_->scatter(v(c.recv, p), r == c.root ? blocks(c.send) : std::vector<Tensor>{}, c.root,
                     po_);
        break;
      default:
        throw InvalidArgument("tpbench: no such operation '" + std::string(c.op->name) + "'");
    }
    return "staged";
  }

  // Each rank sends to the next and receives from the previous (point-to-point path).
  const char* sendrecv(const bench::BenchCall& c) {
    const int r = rank(), n = size();
    const size_t elems = c.shape.param;
    if (n == 1) {
      if (elems) std::memcpy(c.recv, c.send, elems * dtype_size(c.dtype));
      return "p2p";
    }
    auto rw = pg_->irecv(view(c.recv, elems, c.dtype), (r - 1 + n) % n, 0);
    auto sw = pg_->isend(view(c.send, elems, c.dtype), (r + 1) % n, 0);
    rw->wait();
    sw->wait();
    return "p2p";
  }

  std::shared_ptr<ProcessGroup> pg_;
};

}  // namespace
}  // namespace tpcomm::detail

namespace tpcomm::bench {

std::unique_ptr<BenchComm> make_pg_bench_comm(const BenchOptions& o) {
  using namespace tpcomm::detail;
  InitOptions io;
  io.backend = o.transport.empty() ? std::string(Backend::AUTO) : o.transport;
  // The job's deadline (TPCOMM_TIMEOUT) bounds the rendezvous too, as init_process_group's.
  RendezvousResult rr = rendezvous("env://", -1, -1, config::get_duration("TPCOMM_TIMEOUT"));
  return std::make_unique<PgBenchComm>(ProcessGroup::create(rr.store, rr.rank, rr.world_size, io));
}

}  // namespace tpcomm::bench
