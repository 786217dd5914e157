// tpbench's command line.
#include "bench/bench_options.h"

#include <sstream>

#include "bench/bench_ops.h"
#include "core/config.h"
#include "tpcomm/error.hpp"

namespace tpcomm::bench {

namespace {

[[noreturn]] void bad(const std::string& flag, const std::string& value, const std::string& want) {
  throw InvalidArgument("tpbench: bad value '" + value + "' for " + flag + ": " + want +
                        " (tpbench -h lists the options)");
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

uint64_t size_value(const std::string& flag, const std::string& v) {
  auto s = config::parse_size(v);
  if (!s) bad(flag, v, "a size in bytes such as 8, 64K, 1M, 4G");
  return *s;
}

int64_t int_value(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  auto i = config::parse_int(v);
  if (!i || *i < lo || *i > hi) {
    bad(flag, v, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return *i;
}

}  // namespace

std::string bench_usage() {
  return "tpbench: collective and point-to-point bandwidth sweeps in the form of nccl-tests\n"
         "usage: tprun --nproc-per-node N tpbench [options]    (or tpbench --threads N ...)\n"
         "  -b, --minbytes SIZE    smallest size (default 8)\n"
         "  -e, --maxbytes SIZE    largest size (default 64M)\n"
         "  -f, --stepfactor F     multiply the size by F each step (default 2)\n"
         "  -i, --stepbytes SIZE   add SIZE each step instead of -f\n"
         "  -o, --op OPS           operations, comma-separated, or all (default allreduce):\n"
         "                         " +
         bench_op_names() +
         "\n"
         "  -d, --datatype TYPES   dtypes, comma-separated, or all (default float32)\n"
         "      --redop OPS        reductions: sum, prod, min, max, avg, band, bor, bxor,\n"
         "                         premul_sum, or all (default sum)\n"
         "  -r, --root N           root of broadcast, reduce, gather, scatter (default 0)\n"
         "  -n, --iters N          timed iterations per size (default 20)\n"
         "  -w, --warmup_iters N   untimed iterations first (default 5)\n"
         "      --samples S        time S samples of -n iterations, each after a barrier, and\n"
         "                         show the median (default 1: the mean of -n, as nccl-tests)\n"
         "  -c, --check 0|1        verify every result, count #wrong (default 1)\n"
         "  -a, --algorithm NAME   force an algorithm (as TPCOMM_ALGO does for one op)\n"
         "  -t, --transport NAME   transport of the process group (shm, tcp, ...)\n"
         "      --slice SIZE       pipelining slice of the chunked algorithms\n"
         "      --json             JSON instead of the table\n"
         "      --csv              CSV instead of the table\n"
         "      --threads N        run N ranks as threads of this process (no tprun)\n"
         "      --thp 0|1          buffers on transparent huge pages (default 0: 4 KiB pages,\n"
         "                         as a plain allocator gives)\n"
         "      --device cpu|cuda  where the buffers live (default cpu); cuda: on GPU\n"
         "                         LOCAL_RANK % GPUs, filled and checked on the host\n"
         "  -h, --help             this text\n"
         "Columns: size (B), count (elements), type, redop, root, then for out-of-place and\n"
         "in-place: time (us, the slowest rank's mean), algbw = size / time (GB/s), busbw =\n"
         "algbw x the nccl-tests factor of the operation (GB/s), #wrong elements.\n";
}

BenchOptions parse_bench_args(const std::vector<std::string>& args) {
  BenchOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    size_t eq = flag.find('=');
    if (flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    auto is = [&](const char* a, const char* b) { return flag == a || flag == b; };
    if (is("-h", "--help")) {
      o.help = true;
      continue;
    }
    if (is("--json", "--json")) {
      o.json = true;
      continue;
    }
    if (is("--csv", "--csv")) {
      o.csv = true;
      continue;
    }
    static const char* const kValued[] = {"-b",
                                          "--minbytes",
                                          "-e",
                                          "--maxbytes",
                                          "-f",
                                          "--stepfactor",
                                          "-i",
                                          "--stepbytes",
                                          "-o",
                                          "--op",
                                          "-d",
                                          "--datatype",
                                          "--redop",
                                          "-r",
                                          "--root",
                                          "-n",
                                          "--iters",
                                          "-w",
                                          "--warmup_iters",
                                          "--samples",
                                          "-c",
                                          "--check",
                                          "-a",
                                          "--algorithm",
                                          "-t",
                                          "--transport",
                                          "--slice",
                                          "--threads",
                                          "--thp",
                                          "--device"};
    bool known = false;
    for (const char* k : kValued) known = known || flag == k;
    if (!known) {
      throw InvalidArgument("tpbench: unknown option '" + args[i] +
                            "' (tpbench -h lists the options)");
    }
    if (eq == std::string::npos || flag.rfind("--", 0) != 0) {
      if (i + 1 >= args.size()) {
        throw InvalidArgument("tpbench: " + flag + " needs a value (tpbench -h lists the options)");
      }
      value = args[++i];
    }
    if (is("-b", "--minbytes")) {
      o.min_bytes = size_value(flag, value);
    } else if (is("-e", "--maxbytes")) {
      o.max_bytes = size_value(flag, value);
    } else if (is("-f", "--stepfactor")) {
      char* end = nullptr;
      double f = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0' || !(f > 1.0)) bad(flag, value, "a number above 1");
      o.factor = f;
    } else if (is("-i", "--stepbytes")) {
      o.increment = size_value(flag, value);
      if (o.increment == 0) bad(flag, value, "a size above 0");
    } else if (is("-o", "--op")) {
      o.ops.clear();
      for (const std::string& name : split_commas(value)) {
        if (name == "all") {
          for (const OpDesc& d : bench_ops()) o.ops.push_back(d.name);
          continue;
        }
        const OpDesc* d = find_bench_op(name);
        if (d == nullptr) bad(flag, name, "an operation: " + bench_op_names() + ", or all");
        o.ops.push_back(d->name);
      }
      if (o.ops.empty()) bad(flag, value, "at least one operation");
    } else if (is("-d", "--datatype")) {
      o.dtypes.clear();
      for (const std::string& name : split_commas(value)) {
        if (name == "all") {
          for (int t = 0; t < kNumDTypes; ++t) o.dtypes.push_back(static_cast<DType>(t));
          continue;
        }
        auto t = parse_dtype(name);
        if (!t) bad(flag, name, "a dtype such as float32, float16, bfloat16, int32, int8, or all");
        o.dtypes.push_back(*t);
      }
      if (o.dtypes.empty()) bad(flag, value, "at least one dtype");
    } else if (is("--redop", "--redop")) {
      o.redops.clear();
      for (const std::string& name : split_commas(value)) {
        if (name == "all") {
          for (int r = 0; r <= static_cast<int>(ReduceOp::PREMUL_SUM); ++r) {
            o.redops.push_back(static_cast<ReduceOp>(r));
          }
          continue;
        }
        auto r = parse_reduce_op(name);
        if (!r) bad(flag, name, "sum, prod, min, max, avg, band, bor, bxor, premul_sum or all");
        o.redops.push_back(*r);
      }
      if (o.redops.empty()) bad(flag, value, "at least one reduction");
    } else if (is("-r", "--root")) {
      o.root = static_cast<int>(int_value(flag, value, 0, 1 << 30));
    } else if (is("-n", "--iters")) {
      o.iters = static_cast<int>(int_value(flag, value, 1, 1 << 30));
    } else if (is("--samples", "--samples")) {
      o.samples = static_cast<int>(int_value(flag, value, 1, 1 << 20));
    } else if (is("-w", "--warmup_iters")) {
      o.warmup = static_cast<int>(int_value(flag, value, 0, 1 << 30));
    } else if (is("-c", "--check")) {
      o.check = int_value(flag, value, 0, 1) == 1;
    } else if (is("-a", "--algorithm")) {
      o.algorithm = value;
    } else if (is("-t", "--transport")) {
      o.transport = value;
    } else if (is("--slice", "--slice")) {
      o.slice_bytes = size_value(flag, value);
    } else if (is("--threads", "--threads")) {
      o.threads = static_cast<int>(int_value(flag, value, 1, 1024));
    } else if (is("--thp", "--thp")) {
      o.thp = int_value(flag, value, 0, 1) == 1;
    } else if (is("--device", "--device")) {
      if (value != "cpu" && value != "cuda")
        throw InvalidArgument("tpbench: --device '" + value + "': use cpu or cuda");
      o.cuda = value == "cuda";
    }
  }
  if (o.min_bytes > o.max_bytes) {
    throw InvalidArgument("tpbench: -b " + std::to_string(o.min_bytes) + " is larger than -e " +
                          std::to_string(o.max_bytes));
  }
  if (o.json && o.csv) throw InvalidArgument("tpbench: choose one of --json and --csv");
  if (o.cuda && o.threads > 0)
    throw InvalidArgument("tpbench: --device cuda runs under a launcher (tprun), not --threads");
  return o;
}

}  // namespace tpcomm::bench
