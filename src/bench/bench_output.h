// tpbench's output: the nccl-tests table (with the closing "# Avg bus bandwidth" line), JSON
// and CSV. Pure functions of the options and the sweep's rows.
#pragma once

#include <ostream>

#include "bench/bench_options.h"
#include "bench/bench_runner.h"

namespace tpcomm::bench {

/// The average busbw over every valid measurement (out-of-place and in-place), as nccl-tests.
double average_busbw(const SweepResult& r);
/// Total #wrong over all rows (checked ones).
int64_t total_wrong(const SweepResult& r);

void print_table(std::ostream& os, const BenchOptions& o, const SweepResult& r);
void print_json(std::ostream& os, const BenchOptions& o, const SweepResult& r);
void print_csv(std::ostream& os, const BenchOptions& o, const SweepResult& r);

}  // namespace tpcomm::bench
