// tpbench's command line, nccl-tests' own: the collective from the program name
// (all_reduce_perf, ...) or --collective, a size sweep (-b/-e/-f/-i), reduction (-o), dtype
// (-d), root (-r), iterations (-n, -w, -m), averaging over ranks (-a), checking (-c),
// blocking (-z), threads (-t) and GPUs per thread (-g); tpcomm's own choices as long options
// (--transport, --algo, --samples, --json, --csv, --out, --device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tpcomm/types.hpp"

namespace tpcomm::bench {

/// -a: how the ranks' times of a call become the one shown (nccl-tests' values).
enum class Average : int { Rank0 = 0, Mean = 1, Min = 2, Max = 3 };

struct BenchOptions {
  std::string program = "tpbench";                 ///< the name run (messages, the header)
  uint64_t min_bytes = 8;                          ///< -b
  uint64_t max_bytes = 64u << 20;                  ///< -e
  double factor = 2;                               ///< -f (multiplication factor between sizes)
  uint64_t increment = 0;                          ///< -i (fixed increment instead of -f when > 0)
  std::vector<std::string> ops = {"allreduce"};    ///< program name or --collective
  std::vector<DType> dtypes = {DType::Float32};    ///< -d
  std::vector<ReduceOp> redops = {ReduceOp::SUM};  ///< -o
  int root = 0;                                    ///< -r
  int iters = 20;                                  ///< -n
  int warmup = 5;                                  ///< -w
  int agg_iters = 1;                               ///< -m: calls per timed iteration
  Average average = Average::Mean;                 ///< -a (nccl-tests' default: the mean)
  bool blocking = false;                           ///< -z 0|1
  /// --samples S: S timed samples, each a barrier then -n iterations; the time shown is the
  /// median sample. 1: one sample, the -a average of -n iterations, as nccl-tests measures.
  int samples = 1;
  bool check = true;       ///< -c 0|1
  std::string algorithm;   ///< --algo (catalogue name; empty: selection)
  std::string transport;   ///< --transport (handed to the process-group binding)
  size_t slice_bytes = 0;  ///< --slice (pipelining slice; 0: default)
  bool json = false;       ///< --json
  bool csv = false;        ///< --csv
  std::string out;         ///< --out FILE: rank 0 writes its output there ("" or "-": stdout)
  /// -t N: N ranks as threads of this process (no launcher); 0: not given (4 threads without
  /// a launcher, one rank per process under one).
  int threads = 0;
  int ngpus = 1;         ///< -g (1: one device per thread)
  bool thp = false;      ///< --thp 0|1: buffers on transparent huge pages
  bool cuda = false;     ///< --device cpu|cuda: buffers on the GPU (LOCAL_RANK % GPUs)
  bool help = false;     ///< -h
  bool version = false;  ///< --version
};

/// The collective a program name selects (all_reduce_perf -> allreduce), "" for others.
std::string collective_of_program(std::string_view program);

/// Parses argv (without the program name; `program` is argv[0], whose name may pick the
/// collective). Throws cli::UsageError (an InvalidArgument) naming the flag, the value and
/// what it accepts.
BenchOptions parse_bench_args(const std::vector<std::string>& args,
                              std::string_view program = "tpbench");

/// The -h text.
std::string bench_usage(std::string_view program = "tpbench");

}  // namespace tpcomm::bench
