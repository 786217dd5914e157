// tpbench's sweep: for each operation, dtype, reduction and size, time the out-of-place and
// in-place calls (warm-up, then iterations; time = the slowest rank's mean per call, as
// nccl-tests), verify one call of each (#wrong, summed over ranks), and compute algbw and busbw
// with the nccl-tests formulas. Every rank runs it; the rows are the same on every rank.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_comm.h"
#include "bench/bench_options.h"

namespace tpcomm::bench {

class SweepProgress;

/// One timed variant (out-of-place or in-place) of one row.
struct Measure {
  bool valid = false;  ///< false: the operation has no such form (printed N/A)
  double time_us = 0;
  double algbw = 0;    ///< GB/s
  double busbw = 0;    ///< GB/s
  int64_t wrong = -1;  ///< -1: not checked
};

/// One line of the table.
struct Row {
  std::string op;
  size_t size = 0;
  size_t count = 0;
  DType dtype = DType::Float32;
  std::optional<ReduceOp> redop;  ///< nullopt for operations that do not reduce
  int root = -1;                  ///< -1 for operations without a root
  Measure oop, ip;
  std::string algorithm;
};

struct SweepResult {
  int nranks = 0;
  std::string transport;
  std::vector<std::string> ranks;  ///< per rank: pid, host, device, CPUs (the header's list)
  std::vector<Row> rows;
};

/// The sizes of a sweep: min, then times -f (or plus -i) while <= max.
std::vector<size_t> sweep_sizes(const BenchOptions& o);

/// algbw and busbw in GB/s of `bytes` moved in `time_us` by `op` over n ranks.
double algbw_gbps(size_t bytes, double time_us);

/// The median of `v` (the mean of the two middle values for an even count; NaN when empty).
double median_of(std::vector<double> v);
double busbw_gbps(const OpDesc& op, size_t bytes, double time_us, int n);

/// Runs the sweep on this rank (collective: every rank calls it with the same options).
/// Throws InvalidArgument for options that do not fit the group (root out of range,
/// an algorithm no selected operation has, a reduction the dtype does not support).
/// With `progress`, rank 0 reports each size to it (SweepProgress: a line on a terminal).
SweepResult run_sweep(BenchComm& comm, const BenchOptions& o, SweepProgress* progress = nullptr);

/// One (operation, dtype, reduction, size) of a sweep.
struct Step {
  const OpDesc* op = nullptr;
  DType dtype = DType::Float32;
  std::optional<ReduceOp> redop;
  size_t bytes = 0;
};

}  // namespace tpcomm::bench
