// tpbench: choose the communicator (threads or the process-group binding), sweep, print.
#include "bench/tpbench.h"

#include <unistd.h>

#include <iostream>
#include <memory>
#include <mutex>

#include "bench/bench_comm.h"
#include "bench/bench_output.h"
#include "bench/bench_progress.h"
#include "bench/bench_runner.h"
#include "collectives/local_comm.h"
#include "core/config.h"
#include "tpcomm/error.hpp"

namespace tpcomm::bench {

namespace {

void print(std::ostream& out, const BenchOptions& o, const SweepResult& r) {
  if (o.json) {
    print_json(out, o, r);
  } else if (o.csv) {
    print_csv(out, o, r);
  } else {
    print_table(out, o, r);
  }
}

SweepResult run_threads(const BenchOptions& o, int n, SweepProgress* progress) {
  coll::LocalWorld::Options lo;
  lo.hints.name = "local";
  coll::LocalWorld world(n, lo);
  SweepResult result;
  std::mutex mu;
  world.run([&](coll::CollComm& c) {
    CollBenchComm bc(c);
    SweepResult r = run_sweep(bc, o, progress);
    if (c.rank() == 0) {
      std::lock_guard<std::mutex> lk(mu);
      result = std::move(r);
    }
  });
  return result;
}

}  // namespace

int run_tpbench(const BenchOptions& o, std::ostream& out, std::ostream& err, bool progress) {
  SweepProgress line(err, progress);
  SweepProgress* p = progress ? &line : nullptr;
  try {
    if (o.help) {
      out << bench_usage();
      return 0;
    }
    SweepResult result;
    if (o.threads > 0) {
      result = run_threads(o, o.threads, p);
    } else if (const BenchCommFactory& f = bench_comm_factory();
               f && config::is_set("WORLD_SIZE")) {
      // Under a launcher (tprun sets WORLD_SIZE): the process-group binding (src/pg/pg_bench.cc).
      std::unique_ptr<BenchComm> bc = f(o);
      result = run_sweep(*bc, o, p);
      if (bc->rank() != 0) return total_wrong(result) ? 1 : 0;
    } else if (config::is_set("WORLD_SIZE") && config::get_int("WORLD_SIZE") > 1) {
      throw NotSupportedError(
          "tpbench: this build has no process-group binding for tpbench yet, so it cannot run "
          "under a launcher; run it alone with --threads N for an in-process sweep");
    } else {
      out << "# tpbench: no launcher; running 4 ranks as threads (--threads 4)\n";
      result = run_threads(o, 4, p);
    }
    print(out, o, result);
    return total_wrong(result) ? 1 : 0;
  } catch (const std::exception& e) {
    err << "tpbench: error: " << e.what() << "\n";
    return 2;
  }
}

int tpbench_main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  BenchOptions o;
  try {
    o = parse_bench_args(args);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  return run_tpbench(o, std::cout, std::cerr, isatty(STDERR_FILENO) == 1);
}

}  // namespace tpcomm::bench
