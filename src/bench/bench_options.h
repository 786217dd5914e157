// tpbench's command line, in the form of nccl-tests: a size sweep (-b/-e/-f), the operation
// (-o, or all), dtype (-d), reduction (--redop), root (-r), iterations (-n), warm-up (-w),
// checking (-c), algorithm (-a), transport (-t), and machine-readable output (--json, --csv).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tpcomm/types.hpp"

namespace tpcomm::bench {

struct BenchOptions {
  uint64_t min_bytes = 8;                          ///< -b
  uint64_t max_bytes = 64u << 20;                  ///< -e
  double factor = 2;                               ///< -f (multiplication factor between sizes)
  uint64_t increment = 0;                          ///< -i (fixed increment instead of -f when > 0)
  std::vector<std::string> ops = {"allreduce"};    ///< -o (names from the descriptor table)
  std::vector<DType> dtypes = {DType::Float32};    ///< -d
  std::vector<ReduceOp> redops = {ReduceOp::SUM};  ///< --redop
  int root = 0;                                    ///< -r
  int iters = 20;                                  ///< -n
  int warmup = 5;                                  ///< -w
  /// --samples S: S timed samples, each a barrier then -n iterations; the time shown is the
  /// median sample (each sample the slowest rank's), as the peers' benchmarks measure. 1: one
  /// sample, the mean of -n iterations, as nccl-tests measures.
  int samples = 1;
  bool check = true;       ///< -c 0|1
  std::string algorithm;   ///< -a (catalogue name; empty: selection)
  std::string transport;   ///< -t (handed to the process-group binding)
  size_t slice_bytes = 0;  ///< --slice (pipelining slice; 0: default)
  bool json = false;       ///< --json
  bool csv = false;        ///< --csv
  int threads = 0;         ///< --threads N: N ranks as threads of this process
  bool thp = false;        ///< --thp 0|1: buffers on transparent huge pages
  bool help = false;       ///< -h
};

/// Parses argv (without the program name). Throws InvalidArgument naming the flag, the
/// value and what it accepts.
BenchOptions parse_bench_args(const std::vector<std::string>& args);

/// The -h text.
std::string bench_usage();

}  // namespace tpcomm::bench
