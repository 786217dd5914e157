// tpbench's sweep, buffer layouts, initialisation and checks.
#include "bench/bench_runner.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "bench/bench_buffer.h"
#include "bench/bench_progress.h"
#include "collectives/select.h"
#include "core/config.h"
#include "core/usage_error.h"
#include "cuda/device_buffer.h"
#include "tpcomm/error.hpp"

namespace tpcomm::bench {

namespace {

constexpr double kPremulScale = 0.5;

// Values of the data-movement operations: varied, and exact in every dtype (<= 61).
double move_value(int rank, size_t i) {
  return static_cast<double>((static_cast<size_t>(rank) * 131 + i * 7) % 61 + 1);
}

// What dtype dt stores for v.
double stored(DType dt, double v) {
  uint8_t buf[8];
  store_value(dt, buf, 0, v);
  return load_value(dt, buf, 0);
}

// Fills the buffers of `c` with this rank's data, in the layout CollBenchComm::run reads.
void init(const BenchCall& c, int r, int n) {
  const std::string op = c.op->name;
  const size_t p = c.shape.param, N = static_cast<size_t>(n);
  auto fill = [&](void* buf, size_t offset, size_t count, auto value) {
    for (size_t i = 0; i < count; ++i) store_value(c.dtype, buf, offset + i, value(i));
  };
  if (op == "allreduce" || op == "reduce") {
    fill(c.in_place ? c.recv : c.send, 0, p, [&](size_t i) { return init_value(c.redop, r, i); });
  } else if (op == "reducescatter") {
    fill(c.send, 0, p * N, [&](size_t i) { return init_value(c.redop, r, i); });
  } else if (op == "broadcast") {
    if (r == c.root)
      fill(c.in_place ? c.recv : c.send, 0, p, [&](size_t i) { return move_value(r, i); });
  } else if (op == "allgather") {
    if (c.in_place) {
      fill(c.recv, p * static_cast<size_t>(r), p, [&](size_t i) { return move_value(r, i); });
    } else {
      fill(c.send, 0, p, [&](size_t i) { return move_value(r, i); });
    }
  } else if (op == "alltoall") {
    fill(c.send, 0, p * N, [&](size_t i) { return move_value(r, i); });
  } else if (op == "scatter") {
    if (r == c.root) fill(c.send, 0, p * N, [&](size_t i) { return move_value(r, i); });
  } else {  // gather, sendrecv
    fill(c.send, 0, p, [&](size_t i) { return move_value(r, i); });
  }
}

// Elements of this rank's result that differ from what they must be.
int64_t count_wrong(const BenchCall& c, int r, int n) {
  const std::string op = c.op->name;
  const size_t p = c.shape.param, N = static_cast<size_t>(n);
  int64_t wrong = 0;
  auto check = [&](const void* buf, size_t offset, size_t count, auto want) {
    for (size_t i = 0; i < count; ++i) {
      if (!value_matches(c.dtype, load_value(c.dtype, buf, offset + i), want(i))) ++wrong;
    }
  };
  auto reduced = [&](size_t i) {
    return stored(c.dtype, expected_reduction(c.dtype, c.redop, kPremulScale, n, i));
  };
  if (op == "allreduce" || (op == "reduce" && r == c.root)) {
    check(c.recv, 0, p, reduced);
  } else if (op == "reducescatter") {
    check(c.in_place ? c.send : c.recv, c.in_place ? p * static_cast<size_t>(r) : 0, p,
          [&](size_t i) { return reduced(p * static_cast<size_t>(r) + i); });
  } else if (op == "broadcast") {
    check(c.recv, 0, p, [&](size_t i) { return stored(c.dtype, move_value(c.root, i)); });
  } else if (op == "allgather" || (op == "gather" && r == c.root)) {
    for (size_t j = 0; j < N; ++j) {
      check(c.recv, j * p, p,
            [&](size_t i) { return stored(c.dtype, move_value(static_cast<int>(j), i)); });
    }
  } else if (op == "alltoall") {
    for (size_t j = 0; j < N; ++j) {
      check(c.recv, j * p, p, [&](size_t i) {
        return stored(c.dtype, move_value(static_cast<int>(j), p * static_cast<size_t>(r) + i));
      });
    }
  } else if (op == "scatter") {
    check(c.recv, 0, p, [&](size_t i) {
      return stored(c.dtype, move_value(c.root, p * static_cast<size_t>(r) + i));
    });
  } else if (op == "sendrecv") {
    check(c.recv, 0, p, [&](size_t i) { return stored(c.dtype, move_value((r - 1 + n) % n, i)); });
  }
  return wrong;
}

// --device cuda: the host buffers that mirror the device ones. The data is made and checked
// on the host (as nccl-tests does), and copied to and from the GPU around the timed calls.
struct Mirror {
  cuda::DeviceBuffer* send = nullptr;
  cuda::DeviceBuffer* recv = nullptr;
  BenchBuffer* host_send = nullptr;
  BenchBuffer* host_recv = nullptr;
  size_t send_bytes = 0, recv_bytes = 0;
  // The call as init() and count_wrong() see it: on the host buffers.
  BenchCall on_host(const BenchCall& c) const {
    BenchCall h = c;
    h.send = host_send->data();
    h.recv = host_recv->data();
    return h;
  }
};

void init_buffers(const BenchCall& call, const Mirror* mirror, int r, int n) {
  if (mirror == nullptr) return init(call, r, n);
  const BenchCall h = mirror->on_host(call);
  init(h, r, n);
  mirror->send->upload(h.send, mirror->send_bytes);
  mirror->recv->upload(h.recv, mirror->recv_bytes);
}

int64_t wrong_elements(const BenchCall& call, const Mirror* mirror, int r, int n) {
  if (mirror == nullptr) return count_wrong(call, r, n);
  const BenchCall h = mirror->on_host(call);
  mirror->send->download(h.send, mirror->send_bytes);
  mirror->recv->download(h.recv, mirror->recv_bytes);
  return count_wrong(h, r, n);
}

// The ranks' times of a call as one (-a: rank 0's, the mean, the minimum or the maximum).
double over_ranks(BenchComm& bc, const BenchOptions& o, double us) {
  switch (o.average) {
    case Average::Rank0:
      return bc.max(bc.rank() == 0 ? us : -1.0);
    case Average::Mean:
      // Summed as integer picoseconds: exact enough, and BenchComm sums integers.
      return static_cast<double>(bc.sum(static_cast<int64_t>(us * 1e6))) / 1e6 / bc.size();
    case Average::Min:
      return -bc.max(-us);
    case Average::Max:
      return bc.max(us);
  }
  return bc.max(us);
}

Measure measure(BenchComm& bc, BenchCall& call, const BenchOptions& o, const Mirror* mirror,
                std::string* algo) {
  using Clock = std::chrono::steady_clock;
  Measure m;
  m.valid = true;
  const int r = bc.rank(), n = bc.size();
  init_buffers(call, mirror, r, n);
  const char* a = "";
  for (int i = 0; i < o.warmup; ++i) a = bc.run(call);
  // Each sample: a barrier, then -n iterations of -m back-to-back calls; its time is the -a
  // average over ranks of each rank's mean per call. One sample is nccl-tests' measure;
  // several give their median.
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(std::max(o.samples, 1)));
  const int calls = o.iters * std::max(o.agg_iters, 1);
  for (int s = 0; s < std::max(o.samples, 1); ++s) {
    bc.barrier();
    auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) a = bc.run(call);
    // The GPU's queued work (copies back) is part of the call's time, as nccl-tests syncs.
    if (mirror != nullptr) cuda::device_synchronize(call.device.index);
    double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls;
    samples.push_back(over_ranks(bc, o, us));
  }
  *algo = a ? a : "";
  m.time_us = median_of(std::move(samples));
  m.algbw = algbw_gbps(call.shape.size_bytes, m.time_us);
  m.busbw = busbw_gbps(*call.op, call.shape.size_bytes, m.time_us, n);
  if (o.check) {
    init_buffers(call, mirror, r, n);
    const char* b = bc.run(call);
    *algo = b ? b : "";
    m.wrong = bc.sum(wrong_elements(call, mirror, r, n));
  }
  return m;
}

// "Pid 123 on host device cpu (CPUs 0-3, on CPU 2)": what nccl-tests' header lists per rank;
// `device` is where its buffers live (cpu, or cuda:N with --device cuda).
std::string this_rank_line(const std::string& device) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (!CPU_ISSET(c, &set)) continue;
      int e = c;
      while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &set)) ++e;
      cpus +=
          (cpus.empty() ? "" : ",") + std::to_string(c) + (e > c ? "-" + std::to_string(e) : "");
      c = e;
    }
  }
  return "Pid " + std::to_string(getpid()) + " on " + host + " device " + device + " (CPUs " +
         cpus + ", on CPU " + std::to_string(sched_getcpu()) + ")";
}

}  // namespace

std::vector<size_t> sweep_sizes(const BenchOptions& o) {
  std::vector<size_t> sizes;
  for (uint64_t s = o.min_bytes; s <= o.max_bytes;) {
    sizes.push_back(static_cast<size_t>(s));
    uint64_t next = o.increment > 0
                        ? s + o.increment
                        : static_cast<uint64_t>(std::ceil(static_cast<double>(s) * o.factor));
    if (next <= s) next = s + 1;  // -b 0 with -f: 0, 1, 2, 4, ...
    s = next;
  }
  return sizes;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double algbw_gbps(size_t bytes, double time_us) {
  return time_us > 0 ? static_cast<double>(bytes) / time_us / 1e3 : 0;
}

double busbw_gbps(const OpDesc& op, size_t bytes, double time_us, int n) {
  return algbw_gbps(bytes, time_us) * op.bus_factor(n);
}

// Every rank's this_rank_line(), gathered (the header's list of ranks).
std::vector<std::string> describe_ranks(BenchComm& bc, const std::string& device) {
  constexpr size_t kSlot = 160;
  const OpDesc* gather = find_bench_op("allgather");
  const int n = bc.size(), r = bc.rank();
  std::string mine = this_rank_line(device);
  mine.resize(kSlot, '\0');
  BenchCall call;
  call.op = gather;
  call.shape = gather->shape(kSlot * static_cast<size_t>(n), 1, n, r, 0);
  std::vector<char> recv(call.shape.recv_elems);
  call.send = mine.data();
  call.recv = recv.data();
  call.dtype = DType::UInt8;
  bc.run(call);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    const char* slot = recv.data() + static_cast<size_t>(i) * kSlot;
    out.emplace_back(slot, strnlen(slot, kSlot));
  }
  return out;
}

// Every (operation, dtype, reduction, size) of the sweep, in the order they run. Throws for a
// reduction the only dtype does not support (otherwise such pairs are skipped).
std::vector<Step> plan_sweep(const BenchOptions& o) {
  std::vector<Step> plan;
  const bool single = o.dtypes.size() == 1 && o.redops.size() == 1;
  for (const std::string& name : o.ops) {
    const OpDesc& d = *find_bench_op(name);
    for (DType dt : o.dtypes) {
      std::vector<std::optional<ReduceOp>> redops;
      if (d.reduces) {
        for (ReduceOp op : o.redops) {
          if (reduce_op_supports(op, dt)) {
            redops.emplace_back(op);
          } else if (single && o.ops.size() == 1) {
            throw cli::UsageError(o.program + ": -o " + reduce_op_name(op) + " is not defined on " +
                                  dtype_name(dt) +
                                  " (bitwise ops take integer and bool types; avg and premul_sum "
                                  "floating types)");
          }
        }
      } else {
        redops.emplace_back(std::nullopt);
      }
      for (const auto& redop : redops)
        for (size_t bytes : sweep_sizes(o)) plan.push_back(Step{&d, dt, redop, bytes});
    }
  }
  return plan;
}

namespace {

// One step of the sweep: its buffers (on GPU `gpu` when --device cuda, mirrored on the host),
// the out-of-place and, where the collective has one, the in-place measure.
Row run_step(BenchComm& bc, const BenchOptions& o, const Step& s, int gpu) {
  const int n = bc.size(), r = bc.rank();
  const OpDesc& d = *s.op;
  const size_t es = dtype_size(s.dtype);
  BenchCall call;
  call.op = &d;
  call.shape = d.shape(s.bytes, es, n, r, o.root);
  BenchBuffer send(call.shape.send_elems * es, o.thp);
  BenchBuffer recv(call.shape.recv_elems * es, o.thp);
  call.send = send.data();
  call.recv = recv.data();
  std::unique_ptr<cuda::DeviceBuffer> dsend, drecv;
  Mirror mirror;
  if (o.cuda) {
    dsend = std::make_unique<cuda::DeviceBuffer>(call.shape.send_elems * es, gpu);
    drecv = std::make_unique<cuda::DeviceBuffer>(call.shape.recv_elems * es, gpu);
    mirror.send = dsend.get();
    mirror.recv = drecv.get();
    mirror.host_send = &send;
    mirror.host_recv = &recv;
    mirror.send_bytes = call.shape.send_elems * es;
    mirror.recv_bytes = call.shape.recv_elems * es;
    call.send = dsend->data();
    call.recv = drecv->data();
    call.device = Device::cuda(gpu);
  }
  const Mirror* mp = o.cuda ? &mirror : nullptr;
  call.dtype = s.dtype;
  call.redop = s.redop.value_or(ReduceOp::SUM);
  call.premul_scale = kPremulScale;
  call.root = o.root;
  call.algorithm = d.coll && !o.algorithm.empty() && coll::find_algorithm(*d.coll, o.algorithm)
                       ? o.algorithm
                       : "";
  call.slice_bytes = o.slice_bytes;
  Row row;
  row.op = d.name;
  row.size = call.shape.size_bytes;
  row.count = call.shape.count;
  row.dtype = s.dtype;
  row.redop = s.redop;
  row.root = d.rooted ? o.root : -1;
  row.oop = measure(bc, call, o, mp, &row.algorithm);
  if (d.in_place) {
    call.in_place = true;
    row.ip = measure(bc, call, o, mp, &row.algorithm);
  }
  return row;
}

}  // namespace

SweepResult run_sweep(BenchComm& bc, const BenchOptions& o, SweepProgress* progress) {
  SweepResult res;
  res.nranks = bc.size();
  res.transport = bc.transport();
  const int n = bc.size(), r = bc.rank();
  // --device cuda: this process's GPU, by the launcher's local rank (LOCAL_RANK % GPUs).
  int gpu = -1;
  if (o.cuda) {
    const bool launched = config::is_set("LOCAL_RANK");
    gpu =
        cuda::device_for_local_rank(launched ? static_cast<int>(config::get_int("LOCAL_RANK")) : r);
  }
  res.ranks = describe_ranks(bc, o.cuda ? "cuda:" + std::to_string(gpu) : "cpu");
  // The algorithm applies to the operations that have it; it must fit at least one.
  bool algo_fits = o.algorithm.empty();
  for (const std::string& name : o.ops) {
    const OpDesc* d = find_bench_op(name);
    if (d == nullptr) throw cli::UsageError(o.program + ": unknown collective '" + name + "'");
    if (d->rooted && o.root >= n) {
      throw cli::UsageError(o.program + ": root " + std::to_string(o.root) +
                            " (-r) is out of range: " + std::to_string(n) + " ranks");
    }
    if (!o.algorithm.empty() && d->coll && coll::find_algorithm(*d->coll, o.algorithm))
      algo_fits = true;
  }
  if (!algo_fits) {
    std::string names;
    for (const std::string& name : o.ops) {
      const OpDesc* d = find_bench_op(name);
      if (d->coll)
        names += std::string(names.empty() ? "" : "; ") + d->name + ": " +
                 coll::algorithm_names(*d->coll);
    }
    throw cli::UsageError(o.program + ": no selected collective has an algorithm '" + o.algorithm +
                          "' (--algo); " + names);
  }
  std::vector<Step> plan = plan_sweep(o);
  if (progress && r == 0) {
    std::vector<size_t> bytes;
    for (const Step& s : plan) bytes.push_back(s.bytes);
    progress->start(std::move(bytes));
  }
  for (const Step& s : plan) {
    Row row = run_step(bc, o, s, gpu);
    if (progress && r == 0) progress->step(row);
    res.rows.push_back(std::move(row));
  }
  if (progress && r == 0) progress->finish();
  return res;
}

}  // namespace tpcomm::bench
