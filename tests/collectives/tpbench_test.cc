// tpbench: argument parsing (every flag, every error), the size sweep, the descriptor table's
// shapes and the nccl-tests bus-bandwidth factors, the three output formats, and end-to-end
// sweeps of every operation, dtype and reduction over in-process ranks with checking on.
#include "bench/tpbench.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_buffer.h"
#include "bench/bench_ops.h"
#include "bench/bench_options.h"
#include "bench/bench_output.h"
#include "bench/bench_progress.h"
#include "bench/bench_runner.h"
#include "core/json.h"
#include "tpcomm/error.hpp"

namespace tpcomm::bench {
namespace {

BenchOptions parse(std::vector<std::string> args) { return parse_bench_args(args); }

std::string parse_error(std::vector<std::string> args) {
  try {
    parse_bench_args(args);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST(TpbenchArgs, DefaultsAreASensibleSweep) {
  BenchOptions o = parse({});
  EXPECT_EQ(o.min_bytes, 8u);
  EXPECT_EQ(o.max_bytes, 64u << 20);
  EXPECT_EQ(o.factor, 2);
  EXPECT_EQ(o.ops, std::vector<std::string>{"allreduce"});
  EXPECT_EQ(o.dtypes, std::vector<DType>{DType::Float32});
  EXPECT_EQ(o.redops, std::vector<ReduceOp>{ReduceOp::SUM});
  EXPECT_EQ(o.iters, 20);
  EXPECT_EQ(o.warmup, 5);
  EXPECT_EQ(o.samples, 1);
  EXPECT_TRUE(o.check);
  EXPECT_FALSE(o.json || o.csv || o.help || o.thp);
}

TEST(TpbenchArgs, EveryFlagShortAndLong) {
  BenchOptions o = parse({"-b",           "1K",
                          "-e",           "4M",
                          "-f",           "4",
                          "--collective", "allreduce,all_gather",
                          "-d",           "float16,bf16",
                          "-o",           "max",
                          "-r",           "2",
                          "-n",           "7",
                          "-w",           "3",
                          "-c",           "0",
                          "--algo",       "ring",
                          "--transport",  "tcp",
                          "-m",           "4",
                          "-a",           "3",
                          "-z",           "1",
                          "-g",           "1",
                          "--out",        "r.txt",
                          "--slice",      "64K",
                          "-t",           "3",
                          "--thp",        "1",
                          "--samples",    "9",
                          "--json"});
  EXPECT_EQ(o.min_bytes, 1024u);
  EXPECT_EQ(o.max_bytes, 4u << 20);
  EXPECT_EQ(o.factor, 4);
  EXPECT_EQ(o.ops, (std::vector<std::string>{"allreduce", "allgather"}));
  EXPECT_EQ(o.dtypes, (std::vector<DType>{DType::Float16, DType::BFloat16}));
  EXPECT_EQ(o.redops, std::vector<ReduceOp>{ReduceOp::MAX});
  EXPECT_EQ(o.root, 2);
  EXPECT_EQ(o.iters, 7);
  EXPECT_EQ(o.warmup, 3);
  EXPECT_FALSE(o.check);
  EXPECT_EQ(o.algorithm, "ring");
  EXPECT_EQ(o.transport, "tcp");
  EXPECT_EQ(o.slice_bytes, 64u << 10);
  EXPECT_EQ(o.threads, 3);
  EXPECT_TRUE(o.thp);
  EXPECT_EQ(o.samples, 9);
  EXPECT_EQ(o.agg_iters, 4);
  EXPECT_EQ(o.average, Average::Max);
  EXPECT_TRUE(o.blocking);
  EXPECT_EQ(o.ngpus, 1);
  EXPECT_EQ(o.out, "r.txt");
  EXPECT_TRUE(o.json);
  o = parse({"--minbytes=16", "--maxbytes", "32", "--stepbytes=8", "--collective=all",
             "--datatype=all", "--op=all", "--iters=2", "--warmup_iters=0", "--check=1",
             "--nthreads=2", "--agg_iters=3", "--average=0", "--blocking=0", "--ngpus=1",
             "--algorithm=ring", "--csv"});
  EXPECT_EQ(o.min_bytes, 16u);
  EXPECT_EQ(o.increment, 8u);
  EXPECT_EQ(o.ops.size(), bench_ops().size());
  EXPECT_EQ(o.dtypes.size(), static_cast<size_t>(kNumDTypes));
  EXPECT_EQ(o.redops.size(), 9u);
  EXPECT_TRUE(o.csv);
  EXPECT_TRUE(parse({"-n", "2", "-h"}).help);
  EXPECT_EQ(o.threads, 2);
  EXPECT_EQ(o.agg_iters, 3);
  EXPECT_EQ(o.average, Average::Rank0);
  EXPECT_EQ(o.algorithm, "ring");
  EXPECT_EQ(parse({"--redop", "mulsum"}).redops, std::vector<ReduceOp>{ReduceOp::PREMUL_SUM});
  EXPECT_TRUE(parse({"--version"}).version);
}

// nccl-tests' program names pick the collective; --collective wins over the name.
TEST(TpbenchArgs, ProgramNamePicksTheCollective) {
  EXPECT_EQ(parse_bench_args({}, "/x/bin/all_reduce_perf").ops,
            std::vector<std::string>{"allreduce"});
  EXPECT_EQ(parse_bench_args({}, "reduce_scatter_perf").ops,
            std::vector<std::string>{"reducescatter"});
  EXPECT_EQ(parse_bench_args({}, "sendrecv_perf").ops, std::vector<std::string>{"sendrecv"});
  EXPECT_EQ(parse_bench_args({"--collective", "gather"}, "broadcast_perf").ops,
            std::vector<std::string>{"gather"});
  EXPECT_EQ(collective_of_program("tpbench"), "");
  BenchOptions o = parse_bench_args(
      {"-b", "8", "-e", "128M", "-f", "2", "-g", "1", "-t", "1", "-o", "sum", "-d", "float"},
      "all_gather_perf");
  EXPECT_EQ(o.program, "all_gather_perf");
  EXPECT_EQ(o.max_bytes, 128u << 20);
  EXPECT_EQ(o.dtypes, std::vector<DType>{DType::Float32});
  EXPECT_EQ(o.threads, 1);
}

// nccl-tests options tpbench does not have are refused by name, not taken as something else.
TEST(TpbenchArgs, UnsupportedNcclTestsOptionsAreRefusedByName) {
  EXPECT_HAS(parse_error({"-G", "1"}),
             "tpbench: -G,--cudagraph (nccl-tests' CUDA graphs) is not supported by tpbench");
  EXPECT_HAS(parse_error({"-p", "1"}), "-p,--parallel_init");
  EXPECT_HAS(parse_error({"-g", "2"}), "-g 2: tpbench drives one device per thread (-g 1)");
  EXPECT_HAS(parse_error({"-o", "allreduce"}), "-o: 'allreduce' is not a reduction");
}

TEST(TpbenchArgs, DeviceCpuOrCuda) {
  EXPECT_FALSE(parse({}).cuda);
  EXPECT_FALSE(parse({"--device", "cpu"}).cuda);
  EXPECT_TRUE(parse({"--device=cuda"}).cuda);
  EXPECT_TRUE(parse({"--device", "cuda", "-t", "1"}).cuda);
  EXPECT_HAS(parse_error({"--device", "gpu"}), "--device: gpu not in {cpu,cuda}");
  EXPECT_HAS(parse_error({"--device", "cuda", "--threads", "2"}),
             "tpbench: --device cuda runs under a launcher (tprun), one rank per process, not "
             "-t 2");
}

TEST(TpbenchArgs, ErrorsNameTheFlagAndWhatItTakes) {
  EXPECT_HAS(parse_error({"-x"}),
             "tpbench: The following argument was not expected: -x; run 'tpbench --help' for "
             "usage");
  EXPECT_HAS(parse_error({"--bogus=1"}), "The following argument was not expected: --bogus=1");
  EXPECT_HAS(parse_error({"--iter", "3", "--colective", "gather"}),
             "--colective (did you mean --collective?)");
  EXPECT_HAS(parse_error({"-b"}), "--minbytes: 1 required SIZE missing");
  EXPECT_HAS(parse_error({"-b", "lots"}), "--minbytes: 'lots' is not a size such as 8, 64K");
  EXPECT_HAS(parse_error({"-f", "1"}), "--stepfactor: '1' is not a number above 1");
  EXPECT_HAS(parse_error({"--collective", "allreduse"}),
             "--collective: 'allreduse' is not one of allreduce, broadcast");
  EXPECT_HAS(parse_error({"-d", "float7"}), "-d: 'float7' is not a dtype tpcomm has");
  EXPECT_HAS(parse_error({"-o", "mean"}), "-o: 'mean' is not a reduction");
  EXPECT_HAS(parse_error({"-n", "0"}), "--iters: Value 0 not in range 1 to");
  EXPECT_HAS(parse_error({"-c", "2"}), "--check: Value 2 not in range 0 to 1");
  EXPECT_HAS(parse_error({"-a", "4"}), "--average: Value 4 not in range 0 to 3");
  EXPECT_HAS(parse_error({"--thp", "yes"}), "--thp: Value yes not in range 0 to 1");
  EXPECT_HAS(parse_error({"--samples", "0"}), "--samples: Value 0 not in range 1 to");
  EXPECT_HAS(parse_error({"-b", "1M", "-e", "1K"}), "-b 1048576 is larger than -e 1024");
  EXPECT_HAS(parse_error({"--json", "--csv"}), "choose one of --json and --csv");
  EXPECT_HAS(bench_usage(), "-b,--minbytes SIZE");
  EXPECT_HAS(bench_usage(), "busbw");
}

TEST(TpbenchSweep, SizesFollowFactorOrIncrement) {
  BenchOptions o;
  o.min_bytes = 8;
  o.max_bytes = 100;
  o.factor = 2;
  EXPECT_EQ(sweep_sizes(o), (std::vector<size_t>{8, 16, 32, 64}));
  o.increment = 40;
  EXPECT_EQ(sweep_sizes(o), (std::vector<size_t>{8, 48, 88}));
  o.increment = 0;
  o.min_bytes = 0;
  o.max_bytes = 4;
  EXPECT_EQ(sweep_sizes(o), (std::vector<size_t>{0, 1, 2, 4}));
}

TEST(TpbenchFormulas, BusBandwidthFactorsAreThoseOfNcclTests) {
  auto factor = [](const char* op, int n) { return find_bench_op(op)->bus_factor(n); };
  EXPECT_DOUBLE_EQ(factor("allreduce", 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(factor("reducescatter", 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(factor("allgather", 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(factor("broadcast", 8), 1.0);
  EXPECT_DOUBLE_EQ(factor("reduce", 8), 1.0);
  EXPECT_DOUBLE_EQ(factor("alltoall", 5), 4.0 / 5);
  EXPECT_DOUBLE_EQ(factor("gather", 2), 0.5);
  EXPECT_DOUBLE_EQ(factor("scatter", 2), 0.5);
  EXPECT_DOUBLE_EQ(factor("sendrecv", 8), 1.0);
  // algbw = S / t in GB/s; 1 MB in 1000 us is 1 GB/s.
  EXPECT_DOUBLE_EQ(algbw_gbps(1000000, 1000), 1.0);
  EXPECT_DOUBLE_EQ(busbw_gbps(*find_bench_op("allreduce"), 1000000, 1000, 4), 1.5);
  EXPECT_EQ(find_bench_op("all_reduce"), find_bench_op("allreduce"));
  EXPECT_EQ(find_bench_op("nope"), nullptr);
}

TEST(TpbenchFormulas, ShapesRoundToTheGroupAndSizeTheBuffers) {
  // all_gather: S is the whole output; 100 B of float32 over 3 ranks -> 8 per rank, S = 96.
  Shape s = find_bench_op("allgather")->shape(100, 4, 3, 0, 0);
  EXPECT_EQ(s.param, 8u);
  EXPECT_EQ(s.size_bytes, 96u);
  EXPECT_EQ(s.count, 24u);
  EXPECT_EQ(s.send_elems, 8u);
  EXPECT_EQ(s.recv_elems, 24u);
  s = find_bench_op("reducescatter")->shape(100, 4, 3, 1, 0);
  EXPECT_EQ(s.send_elems, 24u);
  EXPECT_EQ(s.recv_elems, 8u);
  s = find_bench_op("allreduce")->shape(100, 8, 3, 1, 0);
  EXPECT_EQ(s.param, 12u);
  EXPECT_EQ(s.size_bytes, 96u);
  s = find_bench_op("gather")->shape(64, 4, 4, 1, 0);  // not the root: no receive buffer
  EXPECT_EQ(s.recv_elems, 0u);
  s = find_bench_op("gather")->shape(64, 4, 4, 0, 0);
  EXPECT_EQ(s.recv_elems, 16u);
  s = find_bench_op("alltoall")->shape(64, 4, 4, 2, 0);
  EXPECT_EQ(s.send_elems, 16u);
  EXPECT_EQ(s.param, 4u);
}

SweepResult sample() {
  SweepResult r;
  r.nranks = 4;
  r.transport = "local";
  Row a;
  a.op = "allreduce";
  a.size = 1024;
  a.count = 256;
  a.redop = ReduceOp::SUM;
  a.oop = {true, 10.0, 0.1024, 0.1536, 0};
  a.ip = {true, 20.0, 0.0512, 0.0768, 0};
  a.algorithm = "ring";
  Row b = a;
  b.op = "gather";
  b.redop.reset();
  b.root = 0;
  b.ip = {};
  b.oop.wrong = 3;
  r.rows = {a, b};
  return r;
}

TEST(TpbenchOutput, TableHasNcclTestsColumnsAndClosingLines) {
  std::ostringstream os;
  print_table(os, BenchOptions{}, sample());
  std::string t = os.str();
  EXPECT_HAS(
      t, "#       size         count      type   redop    root     time   algbw   busbw #wrong");
  EXPECT_HAS(t,
             "        1024           256   float32     sum      -1    10.00    0.10    0.15      0 "
             "   20.00    0.05    0.08      0  ring");
  EXPECT_HAS(t, "    N/A     N/A     N/A    N/A  ring");
  EXPECT_HAS(t, "# Out of bounds values : 3 FAILED");
  EXPECT_HAS(t, "# Avg bus bandwidth    : 0.1280");  // (0.1536 + 0.0768 + 0.1536) / 3
  EXPECT_DOUBLE_EQ(average_busbw(sample()), (0.1536 + 0.0768 + 0.1536) / 3);
  EXPECT_EQ(total_wrong(sample()), 3);
}

TEST(TpbenchOutput, JsonAndCsv) {
  std::ostringstream js, cs;
  print_json(js, BenchOptions{}, sample());
  // The whole document, parsed: same fields, same figures as the table and the CSV.
  json::Json got = json::parse(js.str(), "tpbench --json");
  json::Json want = json::parse(R"({
    "tpbench": {"version": "0.1.0", "program": "tpbench", "nranks": 4, "transport": "local",
                "iters": 20, "warmup": 5, "samples": 1, "check": true, "algorithm": ""},
    "results": [
      {"op": "allreduce", "size": 1024, "count": 256, "type": "float32", "redop": "sum",
       "root": -1, "algorithm": "ring",
       "out_of_place": {"time_us": 10.000, "algbw": 0.1024, "busbw": 0.1536, "wrong": 0},
       "in_place": {"time_us": 20.000, "algbw": 0.0512, "busbw": 0.0768, "wrong": 0}},
      {"op": "gather", "size": 1024, "count": 256, "type": "float32", "redop": "none",
       "root": 0, "algorithm": "ring",
       "out_of_place": {"time_us": 10.000, "algbw": 0.1024, "busbw": 0.1536, "wrong": 3},
       "in_place": null}],
    "avg_busbw": 0.1280, "wrong": 3})",
                                "expected");
  EXPECT_EQ(got, want) << js.str();
  print_csv(cs, BenchOptions{}, sample());
  EXPECT_HAS(cs.str(), "op,size,count,type,redop,root,algorithm,oop_time_us");
  EXPECT_HAS(cs.str(), "allreduce,1024,256,float32,sum,-1,ring,10.000,0.1024,0.1536,0,20.000,");
  EXPECT_HAS(cs.str(), "gather,1024,256,float32,none,0,ring,10.000,0.1024,0.1536,3,,,,\n");
}

// Runs tpbench in process and returns (exit code, stdout + stderr).
std::pair<int, std::string> tpbench(std::vector<std::string> args) {
  std::ostringstream out, err;
  int rc = 0;
  try {
    rc = run_tpbench(parse_bench_args(args), out, err);
  } catch (const std::exception& e) {
    return {2, e.what()};
  }
  return {rc, out.str() + err.str()};
}

TEST(TpbenchRun, EveryOperationChecksCleanOverThreeRanks) {
  auto [rc, text] = tpbench({"--threads", "3", "--collective", "all", "-b", "0", "-e", "4K", "-f",
                             "8", "-n", "2", "-w", "1", "-r", "1"});
  EXPECT_EQ(rc, 0) << text;
  for (const OpDesc& d : bench_ops()) EXPECT_HAS(text, std::string("# ") + d.name + "\n");
  EXPECT_HAS(text, "# Out of bounds values : 0 OK");
  EXPECT_HAS(text, "# Avg bus bandwidth");
}

// Buffers on transparent huge pages (2 MiB aligned, advised) give the same clean results,
// across the 2 MiB boundary of the buffers too.
TEST(TpbenchRun, HugePageBuffersCheckClean) {
  auto [rc, text] =
      tpbench({"--threads", "2", "--thp", "1", "--collective", "allreduce,allgather,broadcast",
               "-b", "1M", "-e", "4M", "-f", "4", "-n", "2", "-w", "1"});
  EXPECT_EQ(rc, 0) << text;
  EXPECT_HAS(text, "# Out of bounds values : 0 OK");
}

TEST(TpbenchRun, EveryDtypeAndReductionChecksClean) {
  auto [rc, text] =
      tpbench({"--threads", "5", "--collective", "allreduce,reducescatter,reduce", "-d", "all",
               "-o", "all", "-b", "64", "-e", "64", "-n", "1", "-w", "0", "--csv"});
  EXPECT_EQ(rc, 0) << text;
  EXPECT_HAS(text, "allreduce,64,32,bfloat16,premul_sum");
  EXPECT_HAS(text, "reducescatter,60,15,int32,bxor");
  EXPECT_EQ(text.find("float32,bxor"), std::string::npos) << "unsupported pairs are skipped";
}

// The peers' protocol: a barrier before each sample, the median of the samples.
TEST(TpbenchFormulas, MedianOfSamples) {
  EXPECT_TRUE(std::isnan(median_of({})));
  EXPECT_EQ(median_of({3.0}), 3.0);
  EXPECT_EQ(median_of({9.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median_of({4.0, 1.0, 100.0, 2.0}), 3.0);
}

TEST(TpbenchRun, SamplesAreTimedAndNamedInTheHeader) {
  auto [rc, text] = tpbench(
      {"--threads", "2", "-b", "8", "-e", "1K", "-f", "8", "-n", "3", "-w", "1", "--samples", "5"});
  EXPECT_EQ(rc, 0) << text;
  EXPECT_HAS(text, "median of 5 samples");
  EXPECT_HAS(text, "# Out of bounds values : 0 OK");
}

TEST(TpbenchRun, ForcedAlgorithmIsReportedAndJsonWorks) {
  auto [rc, text] = tpbench({"--threads", "4", "--algo", "tree", "-b", "1K", "-e", "16K", "-f", "4",
                             "-n", "2", "-w", "0", "--slice", "256", "--json"});
  EXPECT_EQ(rc, 0) << text;
  json::Json doc = json::parse(text, "tpbench --json");
  EXPECT_EQ(doc["tpbench"]["algorithm"], "tree");
  EXPECT_EQ(doc["wrong"], 0);
  const json::Json& rows = json::as_array(doc["results"], "results");
  ASSERT_EQ(rows.size(), 3u) << text;  // 1K, 4K, 16K
  for (const json::Json& row : rows) {
    EXPECT_EQ(row["algorithm"], "tree") << row;
    EXPECT_EQ(row["out_of_place"]["wrong"], 0) << row;
  }
}

TEST(TpbenchRun, OptionsThatDoNotFitTheGroupFailClearly) {
  auto [rc, text] = tpbench({"--threads", "2", "--collective", "broadcast", "-r", "2", "-e", "8"});
  EXPECT_EQ(rc, 2);
  EXPECT_HAS(text, "tpbench: root 2 (-r) is out of range: 2 ranks");
  std::tie(rc, text) = tpbench({"--threads", "2", "-o", "bxor", "-e", "8"});
  EXPECT_EQ(rc, 2);
  EXPECT_HAS(text, "tpbench: -o bxor is not defined on float32");
  std::tie(rc, text) =
      tpbench({"--threads", "2", "--collective", "gather", "--algo", "ring", "-e", "8"});
  EXPECT_EQ(rc, 2);
  EXPECT_HAS(text,
             "no selected collective has an algorithm 'ring' (--algo); gather: binomial, linear");
  std::tie(rc, text) = tpbench({"--out", "/nonexistent-dir/x", "-t", "2", "-e", "8"});
  EXPECT_EQ(rc, 1);
  EXPECT_HAS(text, "tpbench: error: --out: cannot write '/nonexistent-dir/x'");
  std::tie(rc, text) = tpbench({"-h"});
  EXPECT_EQ(rc, 0);
  EXPECT_HAS(text, "usage:");
}

// p2p_bench --alias-recv: views of one memory file are distinct, non-overlapping address
// ranges over the same physical pages: what one view writes, every other one reads.
TEST(BenchBufferTest, ViewsOfOneMemoryFileShareTheirPages) {
  constexpr size_t kBytes = 3 * 4096 + 100;
  auto views = BenchBuffer::views_of_one(kBytes, 2);
  ASSERT_EQ(views.size(), 2u);
  BenchBuffer &a = *views[0], &b = *views[1];
  auto lo = std::min(a.data(), b.data()), hi = std::max(a.data(), b.data());
  EXPECT_GE(hi, lo + kBytes) << "the views overlap";
  a.data()[0] = 7;
  a.data()[kBytes - 1] = 9;
  EXPECT_EQ(b.data()[0], 7);
  EXPECT_EQ(b.data()[kBytes - 1], 9);
  b.data()[4096] = 5;
  EXPECT_EQ(a.data()[4096], 5);
}

TEST(BenchBufferTest, AViewOfABadDescriptorFailsClearly) {
  try {
    BenchBuffer bad(4096, -1);
    FAIL() << "mapping descriptor -1 succeeded";
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "cannot map a 4096-byte view");
  }
}

// ---- progress on a terminal ---------------------------------------------------------------

TEST(TpbenchProgress, EstimateScalesTheLastStepBySizeAndLineSaysWhatRan) {
  // Steps of 1, 2 and 4 KiB, then 1 MiB: after the 2 KiB step took 2 s (fastest 1 s), the
  // 4 KiB step should take 4 s and the 1 MiB one 1024 s.
  std::vector<size_t> bytes = {1024, 2048, 4096, 1 << 20};
  EXPECT_DOUBLE_EQ(SweepProgress::estimate_left(bytes, 2, 2.0, 1.0), 4.0 + 1024.0);
  // Small steps cost at least the fastest one seen (per-call overheads do not shrink).
  EXPECT_DOUBLE_EQ(SweepProgress::estimate_left({1 << 20, 8, 8}, 1, 1.0, 0.5), 1.0);
  EXPECT_DOUBLE_EQ(SweepProgress::estimate_left(bytes, 4, 9.0, 1.0), 0.0);
  Row row = sample().rows[0];
  EXPECT_EQ(SweepProgress::line(2, 4, row, 1028),
            "tpbench: 2/4 allreduce 1024 B float32: 10.0 us, busbw 0.15 GB/s; about 17 min 08 s "
            "left");
  EXPECT_EQ(SweepProgress::line(4, 4, row, 0),
            "tpbench: 4/4 allreduce 1024 B float32: 10.0 us, busbw 0.15 GB/s");
  row.oop = {};
  EXPECT_EQ(SweepProgress::line(1, 4, row, 3.2),
            "tpbench: 1/4 allreduce 1024 B float32: 20.0 us, busbw 0.08 GB/s; about 4 s left");
}

TEST(TpbenchProgress, RankZeroRewritesOneLineAndClearsIt) {
  BenchOptions o =
      parse_bench_args({"--threads", "2", "-b", "8", "-e", "512", "-f", "8", "-n", "2", "-w", "0"});
  std::ostringstream out, err, quiet_out, quiet_err;
  ASSERT_EQ(run_tpbench(o, out, err, true), 0) << err.str();
  std::string e = err.str();
  for (const char* part :
       {"\rtpbench: 1/3 allreduce 8 B float32: ", "\rtpbench: 2/3 allreduce 64 B",
        "\rtpbench: 3/3 allreduce 512 B float32: ", " left\033[K"})
    EXPECT_HAS(e, part);
  EXPECT_EQ(e.substr(e.size() - 4), "\r\033[K") << "the line is cleared at the end";
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 0) << "nothing but the one line";
  ASSERT_EQ(run_tpbench(o, quiet_out, quiet_err, false), 0);
  EXPECT_EQ(quiet_err.str(), "");
  std::string o1 = out.str(), o2 = quiet_out.str();
  EXPECT_HAS(o1, "# Avg bus bandwidth");
  EXPECT_EQ(std::count(o1.begin(), o1.end(), '\n'), std::count(o2.begin(), o2.end(), '\n'));
}

// Runs bin/tpbench with stdout to /dev/null and stderr on a pseudo-terminal (on_tty) or a pipe;
// returns what reached stderr. Bounded: the child is killed after 120 s.
std::string tpbench_stderr(bool on_tty, const std::vector<std::string>& args) {
  std::string bin = std::string(TPCOMM_TEST_BIN_DIR) + "/tpbench";
  std::vector<char*> argv = {bin.data()};
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2] = {-1, -1};
  if (on_tty) {
    if (openpty(&fds[0], &fds[1], nullptr, nullptr, nullptr) != 0) return "openpty failed";
  } else if (pipe(fds) != 0) {
    return "pipe failed";
  }
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(fds[1], 2);
    close(fds[0]);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::string got;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    char buf[4096];
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;  // EOF (pipe) or EIO (pty: the child closed its end)
    got.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  return got;
}

TEST(TpbenchProgress, OnlyOnATerminal) {
  const std::string bin = std::string(TPCOMM_TEST_BIN_DIR) + "/tpbench";
  ASSERT_EQ(access(bin.c_str(), X_OK), 0) << bin << " must be built beside the tests";
  std::vector<std::string> args = {"--threads", "2", "-b", "8", "-e", "64",
                                   "-f",        "8", "-n", "2", "-w", "0"};
  EXPECT_EQ(tpbench_stderr(false, args), "") << "piped: nothing beyond the results";
  std::string tty = tpbench_stderr(true, args);
  EXPECT_HAS(tty, "\rtpbench: 1/2 allreduce 8 B float32: ");
  EXPECT_HAS(tty, "\rtpbench: 2/2 allreduce 64 B float32: ");
}

}  // namespace
}  // namespace tpcomm::bench
