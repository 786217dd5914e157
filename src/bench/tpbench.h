// tpbench's entry point, in the library so that tests can run it (tools/tpbench/main.cc is a
// one-line wrapper).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "bench/bench_options.h"

namespace tpcomm::bench {

/// Runs tpbench with parsed options, writing rank 0's output to `out` and errors to `err`.
/// With --threads N (or, outside a launcher and without a process-group binding, 4 threads)
/// the ranks are threads over LocalWorld; otherwise the registered BenchCommFactory makes the
/// communicator. Returns 0, 1 when a result was wrong or the run failed, 2 for a bad command
/// line (options that do not fit the group included). With `progress`, rank 0
/// keeps a progress line on `err` during the sweep (tpbench_main: when stderr is a terminal).
int run_tpbench(const BenchOptions& o, std::ostream& out, std::ostream& err, bool progress = false);

/// Parses argv and runs (the program's main).
int tpbench_main(int argc, char** argv);

}  // namespace tpcomm::bench
