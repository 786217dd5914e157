// CUDA tensors through a process group by staging (device -> pinned -> wire -> pinned -> device):
// all_reduce of every dtype and op and every other collective equal the host path's result bit
// for bit, point-to-point moves device data (device to device, device to host), the user stream
// orders the operation and receives the result, and a capturing stream is refused. Over tcp,
// shm and ucx, 2 to 4 ranks. The ranks are forked before anything touches CUDA; each uses GPU
// rank % devices.
#include "cuda/staging.h"

#include <cstring>
#include <memory>
#include <random>

#include "common/multiproc.h"
#include "cuda/cuda_test_util.h"
#include "tpcomm/tpcomm.hpp"

namespace tpcomm {
namespace {

using testing::RankContext;

constexpr DType kDTypes[] = {DType::Bool,    DType::UInt8,  DType::Int8,    DType::Int16,
                             DType::Int32,   DType::Int64,  DType::Float16, DType::BFloat16,
                             DType::Float32, DType::Float64};
constexpr ReduceOp kOps[] = {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN,
                             ReduceOp::MAX, ReduceOp::AVG,     ReduceOp::BAND,
                             ReduceOp::BOR, ReduceOp::BXOR,    ReduceOp::PREMUL_SUM};

// Each rank's input: random bytes (every pattern, NaNs included) for the small dtypes, mixed
// with small values for the wide floats.
std::vector<uint8_t> input(DType t, size_t n, int rank) {
  std::mt19937_64 rng(1000 + rank * 17 + static_cast<int>(t));
  const size_t es = dtype_size(t);
  std::vector<uint8_t> v(n * es);
  for (size_t i = 0; i < n; ++i) {
    uint64_t bits = rng();
    if (t == DType::Float32 && i % 2 == 0) {
      const float f = static_cast<float>(static_cast<int>(bits % 201) - 100) / 3.0f;
      std::memcpy(&bits, &f, 4);
    } else if (t == DType::Float64 && i % 2 == 0) {
      const double f = static_cast<double>(static_cast<int>(bits % 201) - 100) / 3.0;
      std::memcpy(&bits, &f, 8);
    }
    std::memcpy(v.data() + i * es, &bits, es);
  }
  return v;
}

struct Gpu {
  const cuda::Driver& d;
  int device;
  CUdeviceptr alloc(size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_EQ(d.MemAlloc(&p, bytes), CUDA_SUCCESS);
    return p;
  }
  Tensor tensor(CUdeviceptr p, DType t, size_t n) {
    return Tensor::raw(reinterpret_cast<void*>(p), static_cast<int64_t>(n), t,
                       Device::cuda(device));
  }
};

void all_reduce_every_dtype_and_op(ProcessGroup& pg, Gpu& g) {
  const size_t n = 1001;
  for (DType t : kDTypes) {
    const size_t bytes = n * dtype_size(t);
    CUdeviceptr dev = g.alloc(bytes);
    for (ReduceOp op : kOps) {
      if (!reduce_op_supports(op, t)) continue;
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + reduce_op_name(op));
      CollectiveOptions o;
      o.premul_scale = 0.375;
      std::vector<uint8_t> host = input(t, n, pg.rank());
      CU_ASSERT(g.d.MemcpyHtoD(dev, host.data(), bytes));
      pg.all_reduce(Tensor::raw(host.data(), n, t), op, o);  // the host path's answer
      pg.all_reduce(g.tensor(dev, t, n), op, o);
      std::vector<uint8_t> got(bytes);
      CU_ASSERT(g.d.MemcpyDtoH(got.data(), dev, bytes));  // legacy stream: after the copy back
      ASSERT_EQ(got, host);
    }
    CU_ASSERT(g.d.MemFree(dev));
  }
}

// A buffer twice over: on the host (the host path's tensor) and on the device (the staged
// path's), with the same contents.
struct Twin {
  Gpu& g;
  DType t;
  size_t n;
  std::vector<uint8_t> host;
  CUdeviceptr dev = 0;
  Twin(Gpu& gpu, DType dt, size_t count, const std::vector<uint8_t>& init)
      : g(gpu), t(dt), n(count), host(init) {
    host.resize(n * dtype_size(t));
    dev = g.alloc(host.size() ? host.size() : 1);
    if (!host.empty()) {
      EXPECT_EQ(g.d.MemcpyHtoD(dev, host.data(), host.size()), CUDA_SUCCESS);
    }
  }
  ~Twin() { g.d.MemFree(dev); }
  Tensor cpu() { return Tensor::raw(host.data(), static_cast<int64_t>(n), t); }
  Tensor cuda() { return g.tensor(dev, t, n); }
  // The device contents equal the host's (after the copies back, on the legacy stream).
  void expect_same(const std::string& what) {
    std::vector<uint8_t> got(host.size());
    if (!got.empty()) {
      ASSERT_EQ(g.d.MemcpyDtoH(got.data(), dev, got.size()), CUDA_SUCCESS);
    }
    EXPECT_EQ(got, host) << what;
  }
};

std::vector<std::unique_ptr<Twin>> twins(Gpu& g, DType t, size_t n, int count, int rank,
                                         bool fill) {
  std::vector<std::unique_ptr<Twin>> v;
  for (int i = 0; i < count; ++i)
    v.push_back(std::make_unique<Twin>(
        g, t, n,
        fill ? input(t, n, rank * 31 + i) : std::vector<uint8_t>(n * dtype_size(t), 0xee)));
  return v;
}

std::vector<Tensor> cpu_list(std::vector<std::unique_ptr<Twin>>& v) {
  std::vector<Tensor> l;
  for (auto& x : v) l.push_back(x->cpu());
  return l;
}
std::vector<Tensor> cuda_list(std::vector<std::unique_ptr<Twin>>& v) {
  std::vector<Tensor> l;
  for (auto& x : v) l.push_back(x->cuda());
  return l;
}

// The other collectives (broadcast, reduce, gathers, scatter): the staged result equals the host
// path's, for an integer, a 32-bit and a 16-bit float dtype, at a count that does not divide by
// the group size.
void every_collective(ProcessGroup& pg, Gpu& g) {
  const int n = pg.size(), me = pg.rank();
  for (DType t : {DType::Int32, DType::Float32, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(t));
    const size_t k = 3 * n + 1;
    {
      Twin x(g, t, k, input(t, k, me));
      pg.broadcast(x.cpu(), n - 1);
      pg.broadcast(x.cuda(), n - 1);
      x.expect_same("broadcast");
    }
    {
      Twin x(g, t, k, input(t, k, me));
      pg.reduce(x.cpu(), 0, ReduceOp::MAX);
      pg.reduce(x.cuda(), 0, ReduceOp::MAX);
      x.expect_same("reduce");
    }
    {
      Twin in(g, t, k, input(t, k, me)), out(g, t, k * n, {});
      pg.all_gather_into_tensor(out.cpu(), in.cpu());
      pg.all_gather_into_tensor(out.cuda(), in.cuda());
      out.expect_same("all_gather_into_tensor");
      // Mixed: a CPU input, a CUDA output.
      CU_ASSERT(g.d.MemsetD8(out.dev, 0, out.host.size()));
      pg.all_gather_into_tensor(out.cuda(), in.cpu());
      out.expect_same("all_gather_into_tensor from a CPU input");
    }
    {
      Twin in(g, t, k, input(t, k, me));
      auto outs = twins(g, t, k, n, me, false);
      pg.all_gather(cpu_list(outs), in.cpu());
      pg.all_gather(cuda_list(outs), in.cuda());
      for (auto& o : outs) o->expect_same("all_gather");
    }
    {
      Twin in(g, t, k, input(t, k, me));
      auto outs = twins(g, t, k, n, me, false);
      pg.gather(in.cpu(), me == 0 ? cpu_list(outs) : std::vector<Tensor>{}, 0);
      pg.gather(in.cuda(), me == 0 ? cuda_list(outs) : std::vector<Tensor>{}, 0);
      for (auto& o : outs) o->expect_same("gather");
    }
    {
      Twin out(g, t, k, {});
      auto ins = twins(g, t, k, n, me, true);
      pg.scatter(out.cpu(), me == 0 ? cpu_list(ins) : std::vector<Tensor>{}, 0);
      pg.scatter(out.cuda(), me == 0 ? cuda_list(ins) : std::vector<Tensor>{}, 0);
      out.expect_same("scatter");
    }
  }
}

// The reducing-scatter and all-to-all collectives, as every_collective.
void scatter_like_collectives(ProcessGroup& pg, Gpu& g) {
  const int n = pg.size(), me = pg.rank();
  for (DType t : {DType::Int32, DType::Float32, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(t));
    const size_t k = 3 * n + 1;
    {
      Twin out(g, t, k, {});
      auto ins = twins(g, t, k, n, me, true);
      pg.reduce_scatter(out.cpu(), cpu_list(ins), ReduceOp::SUM);
      pg.reduce_scatter(out.cuda(), cuda_list(ins), ReduceOp::SUM);
      out.expect_same("reduce_scatter");
    }
    {
      Twin in(g, t, k * n, input(t, k * n, me)), out(g, t, k, {});
      pg.reduce_scatter_tensor(out.cpu(), in.cpu(), ReduceOp::MIN);
      pg.reduce_scatter_tensor(out.cuda(), in.cuda(), ReduceOp::MIN);
      out.expect_same("reduce_scatter_tensor");
    }
    {
      auto ins = twins(g, t, k, n, me, true);
      auto outs = twins(g, t, k, n, me, false);
      pg.all_to_all(cpu_list(outs), cpu_list(ins));
      pg.all_to_all(cuda_list(outs), cuda_list(ins));
      for (auto& o : outs) o->expect_same("all_to_all");
    }
    {
      Twin in(g, t, k * n, input(t, k * n, me)), out(g, t, k * n, {});
      pg.all_to_all_single(out.cpu(), in.cpu());
      pg.all_to_all_single(out.cuda(), in.cuda());
      out.expect_same("all_to_all_single");
      // Uneven: rank r sends j + 1 elements to rank j.
      std::vector<int64_t> send(n), recv(n, me + 1);
      int64_t total_in = 0;
      for (int j = 0; j < n; ++j) total_in += (send[j] = j + 1);
      Twin in2(g, t, total_in, input(t, total_in, me)),
          out2(g, t, static_cast<size_t>(n) * (me + 1), {});
      pg.all_to_all_single(out2.cpu(), in2.cpu(), recv, send);
      pg.all_to_all_single(out2.cuda(), in2.cuda(), recv, send);
      out2.expect_same("all_to_all_single uneven");
    }
  }
  pg.barrier();
}

void point_to_point(ProcessGroup& pg, Gpu& g) {
  const int me = pg.rank(), peer = 1 - me;
  if (me > 1) return;
  const size_t n = 70001;  // past the eager size: rendezvous
  std::vector<int32_t> mine(n), back(n, -1);
  for (size_t i = 0; i < n; ++i) mine[i] = static_cast<int32_t>(i * 3 + me * 1000003);
  CUdeviceptr a = g.alloc(n * 4), b = g.alloc(n * 4);
  CU_ASSERT(g.d.MemcpyHtoD(a, mine.data(), n * 4));
  CU_ASSERT(g.d.MemsetD32(b, 0, n));
  Tensor ta = g.tensor(a, DType::Int32, n), tb = g.tensor(b, DType::Int32, n);
  // Device to device, blocking and async.
  if (me == 0) {
    pg.send(ta, peer, 1);
    auto w = pg.irecv(tb, peer, 2);
    w->wait();
    EXPECT_EQ(w->source_rank(), peer);
  } else {
    pg.recv(tb, peer, 1);
    auto w = pg.isend(ta, peer, 2);
    w->wait();
  }
  CU_ASSERT(g.d.MemcpyDtoH(back.data(), b, n * 4));
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(back[i], static_cast<int32_t>(i * 3 + peer * 1000003)) << i;
  // Device to host memory.
  std::vector<int32_t> host(n, -1);
  if (me == 0) {
    pg.send(ta, peer, 3);
  } else {
    pg.recv(Tensor::of(host), peer, 3);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(host[i], static_cast<int32_t>(i * 3)) << i;
  }
  // An isend whose Work is dropped at once: its pinned copy must stay out of the pool until the
  // send is done, or the next staged send (same size) would reuse it under the first.
  std::vector<int32_t> second(n);
  for (size_t i = 0; i < n; ++i) second[i] = static_cast<int32_t>(i * 5 + 17);
  CUdeviceptr c2 = g.alloc(n * 4);
  CU_ASSERT(g.d.MemcpyHtoD(c2, second.data(), n * 4));
  if (me == 0) {
    pg.isend(ta, peer, 4);  // the Work is dropped
    pg.isend(g.tensor(c2, DType::Int32, n), peer, 5)->wait();
  } else {
    std::vector<int32_t> first(n, -1), next(n, -1);
    pg.recv(Tensor::of(first), peer, 4);
    pg.recv(Tensor::of(next), peer, 5);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(first[i], static_cast<int32_t>(i * 3)) << i;
    EXPECT_EQ(next, second);
  }
  CU_ASSERT(g.d.MemFree(c2));
  CU_ASSERT(g.d.MemFree(a));
  CU_ASSERT(g.d.MemFree(b));
}

// The operation runs after the stream's queued work (a memset the fake delays) and its result
// is on the stream; a capturing stream is refused before any communication.
void streams(ProcessGroup& pg, Gpu& g) {
  const size_t n = 4099;
  CUdeviceptr dev = g.alloc(n * 4);
  CUstream s = nullptr;
  CU_ASSERT(g.d.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
  testing::fake_delay_us(20000);
  CollectiveOptions o;
  o.stream = s;
  for (bool async : {false, true}) {
    CU_ASSERT(g.d.MemsetD32Async(dev, static_cast<unsigned>(pg.rank() + 1 + async), n, s));
    o.async_op = async;
    auto w = pg.all_reduce(g.tensor(dev, DType::Int32, n), ReduceOp::SUM, o);
    w->wait();
    std::vector<int32_t> out(n, -1);
    CU_ASSERT(g.d.MemcpyDtoHAsync(out.data(), dev, n * 4, s));
    CU_ASSERT(g.d.StreamSynchronize(s));
    int32_t want = 0;
    for (int r = 0; r < pg.size(); ++r) want += r + 1 + async;
    EXPECT_EQ(out, std::vector<int32_t>(n, want)) << (async ? "async" : "blocking");
  }
  // synchronize(): the host waits for the copy back too, so a read not ordered after the
  // stream (the legacy stream does not wait for a non-blocking one) sees the result.
  CU_ASSERT(g.d.MemsetD32Async(dev, static_cast<unsigned>(pg.rank() + 7), n, s));
  o.async_op = true;
  pg.all_reduce(g.tensor(dev, DType::Int32, n), ReduceOp::SUM, o)->synchronize();
  EXPECT_EQ(g.d.StreamQuery(s), CUDA_SUCCESS) << "the copy back is still queued";
  std::vector<int32_t> out(n, -1);
  CU_ASSERT(g.d.MemcpyDtoH(out.data(), dev, n * 4));
  int32_t want = 0;
  for (int r = 0; r < pg.size(); ++r) want += r + 7;
  EXPECT_EQ(out, std::vector<int32_t>(n, want)) << "after synchronize()";
  testing::fake_delay_us(0);
  CUstream cap = nullptr;
  CU_ASSERT(g.d.StreamCreate(&cap, CU_STREAM_NON_BLOCKING));
  CU_ASSERT(g.d.StreamBeginCapture(cap, CU_STREAM_CAPTURE_MODE_RELAXED));
  o.stream = cap;
  o.async_op = false;
  try {
    pg.all_reduce(g.tensor(dev, DType::Int32, n), ReduceOp::SUM, o);
    ADD_FAILURE() << "a capturing stream was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("capturing a CUDA graph"), std::string::npos) << e.what();
  }
  CUgraph graph = nullptr;
  CU_ASSERT(g.d.StreamEndCapture(cap, &graph));
  CU_ASSERT(g.d.GraphDestroy(graph));
  CU_ASSERT(g.d.StreamDestroy(cap));
  CU_ASSERT(g.d.StreamDestroy(s));
  CU_ASSERT(g.d.MemFree(dev));
}

struct Case {
  std::string transport;
  int ranks;
  std::string ucx_tls;
};

class CudaStaging : public ::testing::TestWithParam<Case> {};

TEST_P(CudaStaging, CollectivesPointToPointAndStreams) {
  const Case c = GetParam();
  testing::select_cuda_driver();
  testing::RunOptions opt;
  if (c.transport == "ucx") {
    if (!is_ucx_available()) GTEST_SKIP() << "UCX is not built in or not usable here";
    opt.env = {{"TPCOMM_UCX_TLS", c.ucx_tls}};
  }
  auto r = testing::run_ranks(
      c.ranks,
      [&](RankContext& ctx) {
        InitOptions io;
        io.backend = c.transport;
        io.timeout = std::chrono::seconds(60);
        auto pg = ProcessGroup::create(ctx.store, ctx.rank, ctx.world_size, io);
        const cuda::Driver& d = testing::drv();
        Gpu g{d, pg->rank() % cuda::driver_status().devices};
        cuda::use_device(d, g.device);
        all_reduce_every_dtype_and_op(*pg, g);
        every_collective(*pg, g);
        scatter_like_collectives(*pg, g);
        point_to_point(*pg, g);
        streams(*pg, g);
        pg->destroy();
      },
      opt);
  EXPECT_RANKS_OK(r);
}

INSTANTIATE_TEST_SUITE_P(Transports, CudaStaging,
                         ::testing::Values(Case{"tcp", 2, ""}, Case{"shm", 2, ""},
                                           Case{"tcp", 3, ""}, Case{"shm", 4, ""},
                                           Case{"ucx", 2, "tcp"}, Case{"ucx", 4, "shm,self"}),
                         [](const auto& info) {
                           return info.param.transport + std::to_string(info.param.ranks);
                         });

}  // namespace
}  // namespace tpcomm
