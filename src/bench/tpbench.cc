// tpbench: choose the communicator (threads or the process-group binding), sweep, print.
#include "bench/tpbench.h"

#include <unistd.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>

#include "bench/bench_comm.h"
#include "bench/bench_output.h"
#include "bench/bench_progress.h"
#include "bench/bench_runner.h"
#include "collectives/local_comm.h"
#include "core/cli.h"
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

// Rank 0's output: to --out FILE, else to `out`.
void emit(std::ostream& out, const BenchOptions& o, const SweepResult& r) {
  if (o.out.empty() || o.out == "-") {
    print(out, o, r);
    return;
  }
  std::ofstream f(o.out, std::ios::trunc);
  if (!f) throw InvalidArgument("--out: cannot write '" + o.out + "'");
  print(f, o, r);
  f.close();
  if (!f) throw InvalidArgument("--out: writing '" + o.out + "' failed");
}

int sweep(const BenchOptions& o, std::ostream& out, SweepProgress* p) {
  SweepResult result;
  const bool launched = config::is_set("WORLD_SIZE");
  if (launched && o.threads > 1)
    throw cli::UsageError(o.program + ": -t " + std::to_string(o.threads) +
                          ": under a launcher each process is one rank (-t 1); -t N runs N "
                          "ranks as threads of one process without a launcher");
  if (!launched && o.cuda)
    throw cli::UsageError(o.program +
                          ": --device cuda runs under a launcher (tprun), one rank per process; "
                          "without one the ranks are threads of this process on host memory");
  if (!launched) {
    int n = o.threads > 0 ? o.threads : 4;
    if (o.threads == 0 && !o.json && !o.csv)
      out << "# " << o.program << ": no launcher; running 4 ranks as threads (-t 4)\n";
    result = run_threads(o, n, p);
  } else {
    // Under a launcher (tprun sets WORLD_SIZE): one rank of a process group.
    std::unique_ptr<BenchComm> bc = make_pg_bench_comm(o);
    result = run_sweep(*bc, o, p);
    if (bc->rank() != 0) return total_wrong(result) ? 1 : 0;
  }
  emit(out, o, result);
  return total_wrong(result) ? 1 : 0;
}

}  // namespace

int run_tpbench(const BenchOptions& o, std::ostream& out, std::ostream& err, bool progress) {
  SweepProgress line(err, progress);
  SweepProgress* p = progress ? &line : nullptr;
  return cli::guarded(o.program, err, [&] {
    if (o.help) {
      out << bench_usage(o.program);
      return 0;
    }
    if (o.version) {
      out << cli::version_line(o.program) << "\n";
      return 0;
    }
    return sweep(o, out, p);
  });
}

int tpbench_main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string program = argc > 0 && argv[0] ? argv[0] : "tpbench";
  program = program.substr(program.rfind('/') + 1);
  BenchOptions o;
  int rc = cli::guarded(program, std::cerr, [&] {
    o = parse_bench_args(args, program);
    return 0;
  });
  if (rc != 0) return rc;
  return run_tpbench(o, std::cout, std::cerr, isatty(STDERR_FILENO) == 1);
}

}  // namespace tpcomm::bench
