// The seam between tpbench and a communicator. BenchComm is all tpbench needs: run one
// operation on given buffers, a barrier, and max/sum over ranks for the timings and the
// #wrong counts. CollBenchComm implements it over a coll::CollComm (the in-process
// LocalWorld of `tpbench --threads N`); make_pg_bench_comm gives one over a ProcessGroup, so
// that `tprun ... tpbench` runs over the real transports.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "bench/bench_ops.h"
#include "bench/bench_options.h"
#include "collectives/comm.h"

namespace tpcomm::bench {

/// One call as tpbench makes it. Buffers: `send` holds shape.send_elems and `recv`
/// shape.recv_elems elements. In place, the data lives where bench_runner.cc's layout puts
/// it (the receive buffer, or the send buffer for reducescatter).
struct BenchCall {
  const OpDesc* op = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  Shape shape;
  DType dtype = DType::Float32;
  ReduceOp redop = ReduceOp::SUM;
  double premul_scale = 1.0;
  int root = 0;
  bool in_place = false;
  std::string algorithm;  ///< empty: selection
  size_t slice_bytes = 0;
  Device device = Device::cpu();  ///< where send and recv live (--device)
};

/// One rank's communicator, as tpbench sees it.
class BenchComm {
 public:
  virtual ~BenchComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Transport name for the header ("local" for threads).
  virtual std::string transport() const = 0;
  /// Runs the call (blocking); returns the name of the algorithm that ran (a static string:
  /// the timed loop builds no string).
  virtual const char* run(const BenchCall& call) = 0;
  virtual void barrier() = 0;
  /// The maximum / sum of v over all ranks, on every rank.
  virtual double max(double v) = 0;
  virtual int64_t sum(int64_t v) = 0;
};

/// BenchComm over the host collectives and a CollComm.
class CollBenchComm : public BenchComm {
 public:
  explicit CollBenchComm(coll::CollComm& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  std::string transport() const override { return comm_.hints().name; }
  const char* run(const BenchCall& call) override;
  void barrier() override;
  double max(double v) override;
  int64_t sum(int64_t v) override;

 private:
  coll::CollComm& comm_;
};

/// This process's BenchComm for a run under a launcher (no --threads): a ProcessGroup made from
/// env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), its backend from `-t`
/// (pg_bench_comm.cc).
std::unique_ptr<BenchComm> make_pg_bench_comm(const BenchOptions& o);

}  // namespace tpcomm::bench
