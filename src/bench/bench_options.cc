// tpbench's command line on CLI11, with nccl-tests' letters and meanings.
#include "bench/bench_options.h"

#include <cstdlib>
#include <optional>
#include <sstream>

#include "bench/bench_ops.h"
#include "core/cli.h"
#include "core/config.h"
#include "tpcomm/error.hpp"

namespace tpcomm::bench {

namespace {

// nccl-tests' programs and the collective each runs.
struct Program {
  const char* name;
  const char* op;
};
constexpr Program kPrograms[] = {
    {"all_reduce_perf", "allreduce"},
    {"all_gather_perf", "allgather"},
    {"broadcast_perf", "broadcast"},
    {"reduce_perf", "reduce"},
    {"reduce_scatter_perf", "reducescatter"},
    {"alltoall_perf", "alltoall"},
    {"gather_perf", "gather"},
    {"scatter_perf", "scatter"},
    {"sendrecv_perf", "sendrecv"},
};

// nccl-tests options tpbench does not have: refused by name rather than taken as something
// else.
struct Unsupported {
  const char* names;
  const char* what;
};
constexpr Unsupported kUnsupported[] = {
    {"-G,--cudagraph", "CUDA graphs"},
    {"-p,--parallel_init", "parallel communicator init"},
    {"-C,--report_cputime", "CPU-time reporting"},
    {"-R,--local_register", "buffer registration"},
    {"-N,--run_cycles", "run cycles"},
    {"-T,--timeout", "the per-test timeout (use TPCOMM_TIMEOUT)"},
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// The raw values of the options whose parsing is ours (sizes, lists).
struct Raw {
  std::string b, e, i, collective, d, o, slice, device = "cpu";
  int check = 1, blocking = 0, thp = 0, average = 1;
  std::vector<std::string> unsupported;
};

CLI::Validator size_check() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        return config::parse_size(v) ? "" : "'" + v + "' is not a size such as 8, 64K, 1M, 4G";
      },
      "");
}

void add_options(CLI::App& app, BenchOptions& o, Raw& r) {
  app.add_option("-b,--minbytes", r.b, "smallest size (default 8)")
      ->type_name("SIZE")
      ->check(size_check());
  app.add_option("-e,--maxbytes", r.e, "largest size (default 64M)")
      ->type_name("SIZE")
      ->check(size_check());
  app.add_option("-f,--stepfactor", o.factor, "multiply the size by F each step (default 2)")
      ->type_name("F")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            char* end = nullptr;
            double f = std::strtod(v.c_str(), &end);
            return end != v.c_str() && *end == '\0' && f > 1.0
                       ? ""
                       : "'" + v + "' is not a number above 1";
          },
          ""));
  app.add_option("-i,--stepbytes", r.i, "add SIZE each step instead of -f")
      ->type_name("SIZE")
      ->check(size_check());
  app.add_option("--collective", r.collective,
                 "collectives, comma-separated, or all (default: the program's, else "
                 "allreduce): " +
                     bench_op_names())
      ->type_name("NAMES");
  app.add_option("-o,--op,--redop", r.o,
                 "reductions: sum, prod, min, max, avg, mulsum (premul_sum), band, bor, bxor, "
                 "or all (default sum)")
      ->type_name("OPS");
  app.add_option("-d,--datatype", r.d,
                 "dtypes, comma-separated, or all: int8, uint8, int32, int64, half, float, "
                 "double, bfloat16 (and float16, float32, ...; default float)")
      ->type_name("TYPES");
  app.add_option("-r,--root", o.root, "root of broadcast, reduce, gather, scatter (default 0)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("-n,--iters", o.iters, "timed iterations per size (default 20)")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("-w,--warmup_iters", o.warmup, "untimed iterations first (default 5)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("-m,--agg_iters", o.agg_iters,
                 "calls per timed iteration; the time shown is per call (default 1)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("-a,--average", r.average,
                 "the time shown, over ranks: 0 rank 0's, 1 the mean, 2 the minimum, 3 the "
                 "maximum (default 1)")
      ->check(CLI::Range(0, 3));
  app.add_option("-c,--check", r.check, "verify every result, count #wrong (default 1)")
      ->check(CLI::Range(0, 1));
  app.add_option("-z,--blocking", r.blocking,
                 "0|1: tpcomm's host calls complete before they return, so both time the same "
                 "(default 0)")
      ->check(CLI::Range(0, 1));
  app.add_option("-t,--nthreads,--threads", o.threads,
                 "N ranks as threads of this process, without a launcher (default 4 there; under "
                 "tprun each process is one rank: 1)")
      ->check(CLI::Range(1, 1024));
  app.add_option("-g,--ngpus", o.ngpus, "devices per thread: 1 (each rank one host buffer set)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--samples", o.samples,
                 "time S samples of -n iterations, each after a barrier, and show the median "
                 "(default 1: one sample, as nccl-tests)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--algo,--algorithm", o.algorithm,
                 "force an algorithm (as TPCOMM_ALGO does for one collective)")
      ->type_name("NAME");
  app.add_option("--transport", o.transport, "transport of the process group (shm, tcp, ...)")
      ->type_name("NAME");
  app.add_option("--slice", r.slice, "pipelining slice of the chunked algorithms")
      ->type_name("SIZE")
      ->check(size_check());
  app.add_flag("--json", o.json, "JSON instead of the table");
  app.add_flag("--csv", o.csv, "CSV instead of the table");
  app.add_option("--out", o.out,
                 "rank 0 writes the table, JSON or CSV to FILE instead of stdout (clean under "
                 "tprun, which prefixes worker output)")
      ->type_name("FILE");
  app.add_option("--thp", r.thp, "0|1: buffers on transparent huge pages (default 0: 4 KiB pages)")
      ->check(CLI::Range(0, 1));
  app.add_option("--device", r.device,
                 "where the buffers live (default cpu); cuda: on GPU LOCAL_RANK % GPUs, filled "
                 "and checked on the host")
      ->type_name("cpu|cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  for (const Unsupported& u : kUnsupported)
    app.add_option(u.names, r.unsupported,
                   std::string("nccl-tests' ") + u.what + ": not supported by tpbench")
        ->group("nccl-tests options tpbench refuses");
}

std::string describe(CLI::App& app, std::string_view program) {
  std::string p(program);
  app.description("usage: tprun --nproc-per-node N " + p + " [options]   (or " + p +
                  " -t N: N ranks as threads)\n\n" + p +
                  ": collective sweeps in the form of nccl-tests, with nccl-tests' options. The\n"
                  "collective comes from the program name (all_reduce_perf, all_gather_perf,\n"
                  "broadcast_perf, reduce_perf, reduce_scatter_perf, alltoall_perf, gather_perf,\n"
                  "scatter_perf, sendrecv_perf: links to tpbench) or --collective.");
  app.footer(
      "Columns: size (B), count (elements), type, redop, root, then for out-of-place and\n"
      "in-place: time (us, the -a average over ranks of the mean per call), algbw = size /\n"
      "time (GB/s), busbw = algbw x the nccl-tests factor of the collective (GB/s), #wrong\n"
      "elements. Exit status: 0, 1 when a result was wrong or the run failed, 2 for a bad\n"
      "command line.");
  return p;
}

std::vector<std::string> parse_collectives(std::string_view tool, const std::string& value) {
  std::vector<std::string> ops;
  for (const std::string& name : split_commas(value)) {
    if (name == "all") {
      for (const OpDesc& d : bench_ops()) ops.push_back(d.name);
      continue;
    }
    const OpDesc* d = find_bench_op(name);
    if (d == nullptr)
      cli::usage_error(tool,
                       "--collective: '" + name + "' is not one of " + bench_op_names() + ", all");
    ops.push_back(d->name);
  }
  if (ops.empty()) cli::usage_error(tool, "--collective: needs at least one collective");
  return ops;
}

std::vector<DType> parse_dtypes(std::string_view tool, const std::string& value) {
  std::vector<DType> out;
  for (const std::string& name : split_commas(value)) {
    if (name == "all") {
      for (int t = 0; t < kNumDTypes; ++t) out.push_back(static_cast<DType>(t));
      continue;
    }
    auto t = parse_dtype(name);
    if (!t)
      cli::usage_error(tool, "-d: '" + name +
                                 "' is not a dtype tpcomm has: int8, uint8, int16, int32, "
                                 "int64, half, float, double, bfloat16, bool, or all");
    out.push_back(*t);
  }
  if (out.empty()) cli::usage_error(tool, "-d: needs at least one dtype");
  return out;
}

std::vector<ReduceOp> parse_redops(std::string_view tool, const std::string& value) {
  std::vector<ReduceOp> out;
  for (const std::string& name : split_commas(value)) {
    if (name == "all") {
      for (int r = 0; r <= static_cast<int>(ReduceOp::PREMUL_SUM); ++r)
        out.push_back(static_cast<ReduceOp>(r));
      continue;
    }
    auto r =
        name == "mulsum" ? std::optional<ReduceOp>(ReduceOp::PREMUL_SUM) : parse_reduce_op(name);
    if (!r)
      cli::usage_error(tool, "-o: '" + name +
                                 "' is not a reduction: sum, prod, min, max, avg, mulsum, band, "
                                 "bor, bxor, premul_sum or all");
    out.push_back(*r);
  }
  if (out.empty()) cli::usage_error(tool, "-o: needs at least one reduction");
  return out;
}

}  // namespace

std::string collective_of_program(std::string_view program) {
  std::string_view base = program.substr(program.rfind('/') + 1);
  for (const Program& p : kPrograms)
    if (base == p.name) return p.op;
  return "";
}

std::string bench_usage(std::string_view program) {
  BenchOptions o;
  Raw r;
  CLI::App app;
  std::string tool(program.substr(program.rfind('/') + 1));
  cli::setup(app, tool);
  add_options(app, o, r);
  describe(app, tool);
  return app.help();
}

BenchOptions parse_bench_args(const std::vector<std::string>& args, std::string_view program) {
  BenchOptions o;
  Raw r;
  CLI::App app;
  const std::string tool(program.substr(program.rfind('/') + 1));
  o.program = tool;
  cli::setup(app, tool);
  add_options(app, o, r);
  describe(app, tool);
  std::vector<std::string> a = args;
  cli::argparse_spellings(app, a, tool);
  switch (cli::parse(app, a, tool)) {
    case cli::Parsed::Help:
      o.help = true;
      return o;
    case cli::Parsed::Version:
      o.version = true;
      return o;
    case cli::Parsed::Run:
      break;
  }
  for (const Unsupported& u : kUnsupported) {
    if (app.count(std::string(u.names).substr(0, 2)) > 0)
      cli::usage_error(
          tool, std::string(u.names) + " (nccl-tests' " + u.what + ") is not supported by tpbench");
  }
  if (!r.b.empty()) o.min_bytes = *config::parse_size(r.b);
  if (!r.e.empty()) o.max_bytes = *config::parse_size(r.e);
  if (!r.i.empty()) {
    o.increment = *config::parse_size(r.i);
    if (o.increment == 0) cli::usage_error(tool, "-i: the step must be above 0");
  }
  if (!r.slice.empty()) o.slice_bytes = *config::parse_size(r.slice);
  std::string from_program = collective_of_program(tool);
  if (!r.collective.empty()) {
    o.ops = parse_collectives(tool, r.collective);
  } else if (!from_program.empty()) {
    o.ops = {from_program};
  }
  if (!r.d.empty()) o.dtypes = parse_dtypes(tool, r.d);
  if (!r.o.empty()) o.redops = parse_redops(tool, r.o);
  o.check = r.check == 1;
  o.blocking = r.blocking == 1;
  o.thp = r.thp == 1;
  o.average = static_cast<Average>(r.average);
  if (o.ngpus != 1)
    cli::usage_error(tool, "-g " + std::to_string(o.ngpus) +
                               ": tpbench drives one device per thread (-g 1); more GPUs per "
                               "thread are not supported");
  if (o.min_bytes > o.max_bytes)
    cli::usage_error(tool, "-b " + std::to_string(o.min_bytes) + " is larger than -e " +
                               std::to_string(o.max_bytes));
  if (o.json && o.csv) cli::usage_error(tool, "choose one of --json and --csv");
  o.cuda = r.device == "cuda";
  if (o.cuda && o.threads > 1)
    cli::usage_error(tool,
                     "--device cuda runs under a launcher (tprun), one rank per process, "
                     "not -t " +
                         std::to_string(o.threads));
  return o;
}

}  // namespace tpcomm::bench
