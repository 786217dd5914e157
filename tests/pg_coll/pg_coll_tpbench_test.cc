// Tier (c): tpbench under tprun (the README's main job) runs its sweep as two processes over
// the process-group collectives, over shm by default and over tcp with --transport tcp; nccl-tests
// runbook lines run unchanged through the all_reduce_perf, ... links.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>

namespace {

// Runs tprun (2 ranks, a free port) on tpbench with `args`; bounded by timeout(1).
std::string run_tpbench(const std::string& args, int* status,
                        const std::string& program = "tpbench") {
  const std::string bin = TPCOMM_TEST_BIN_DIR;
  std::string cmd = "timeout -k 5 120 " + bin + "/tprun --nproc-per-node 2 --master-port 0 " + bin +
                    "/" + program + " " + args + " 2>&1";
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) {
    *status = -1;
    return "popen failed";
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  *status = pclose(f);
  return out;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(PgCollTpbench, UnderTprunOverShmAndTcp) {
  int st = 0;
  std::string out = run_tpbench("-b 8 -e 64K -f 64 -n 3 -w 1", &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_TRUE(has(out, "2 ranks, transport shm")) << out;
  EXPECT_TRUE(has(out, "shm_direct")) << out;
  EXPECT_TRUE(has(out, "Out of bounds values : 0 OK")) << out;

  out = run_tpbench("--transport tcp -b 8 -e 64K -f 64 -n 3 -w 1 --collective allreduce,allgather",
                    &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_TRUE(has(out, "2 ranks, transport tcp")) << out;
  EXPECT_FALSE(has(out, "shm_direct")) << out;
  EXPECT_TRUE(has(out, "Out of bounds values : 0 OK")) << out;

  out = run_tpbench("--transport tcp --collective sendrecv -b 8 -e 64K -f 64 -n 3 -w 1", &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_TRUE(has(out, "p2p")) << out;
}

// A runbook's line, with a small -e, for each nccl-tests program: the collective from the name,
// nccl-tests' header (parameters, then each rank's pid, host and device) and table.
TEST(PgCollTpbench, NcclTestsCommandLinesRunUnchanged) {
  const char* programs[] = {"all_reduce_perf",     "all_gather_perf", "broadcast_perf",
                            "reduce_scatter_perf", "alltoall_perf",   "sendrecv_perf"};
  const char* ops[] = {"allreduce",     "allgather", "broadcast",
                       "reducescatter", "alltoall",  "sendrecv"};
  for (size_t i = 0; i < std::size(programs); ++i) {
    int st = 0;
    std::string out = run_tpbench("-b 8 -e 128K -f 2 -g 1 -t 1 -o sum -d float", &st, programs[i]);
    EXPECT_EQ(st, 0) << programs[i] << "\n" << out;
    EXPECT_TRUE(has(out, std::string("# ") + programs[i] + " (tpcomm ")) << out;
    EXPECT_TRUE(has(out,
                    "# nThread 1 nGpus 1 minBytes 8 maxBytes 131072 step: 2(factor) warmup "
                    "iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0"))
        << out;
    EXPECT_TRUE(has(out, "#  Rank  0 Group  0 Pid ")) << out;
    EXPECT_TRUE(has(out, "#  Rank  1 Group  0 Pid ")) << out;
    EXPECT_TRUE(has(out, std::string("# ") + ops[i] + "\n")) << out;
    EXPECT_TRUE(has(out, "#       size         count      type   redop    root     time   algbw"))
        << out;
    EXPECT_TRUE(has(out, "     131072 ")) << out;
    EXPECT_TRUE(has(out, "Out of bounds values : 0 OK")) << out;
    EXPECT_TRUE(has(out, "# Avg bus bandwidth    : ")) << out;
  }
}

// Under tprun, -t N > 1 (threads per process) and -g N > 1 are refused: status 2, one line.
TEST(PgCollTpbench, ThreadsAndGpusPerProcessRefusedUnderTprun) {
  int st = 0;
  std::string out = run_tpbench("-t 2 -b 8 -e 8", &st, "all_reduce_perf");
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << out;
  EXPECT_TRUE(has(out, "all_reduce_perf: -t 2: under a launcher each process is one rank (-t 1)"))
      << out;
  EXPECT_FALSE(has(out, "terminate called")) << out;
  out = run_tpbench("-g 8 -b 8 -e 8", &st, "all_reduce_perf");
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << out;
  EXPECT_TRUE(has(out, "all_reduce_perf: -g 8: tpbench drives one device per thread")) << out;
}

// --csv --out FILE: rank 0 writes clean CSV there (tprun prefixes what workers print).
TEST(PgCollTpbench, CsvUnderTprunWithOutIsClean) {
  char dir[] = "/tmp/tpbench_out_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/r.csv";
  int st = 0;
  std::string out = run_tpbench("-b 8 -e 64 -f 8 -n 2 -w 1 --csv --out " + file, &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_FALSE(has(out, "op,size")) << out;
  std::string csv;
  if (FILE* f = fopen(file.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) csv.append(buf, n);
    fclose(f);
  }
  unlink(file.c_str());
  rmdir(dir);
  ASSERT_EQ(csv.rfind("op,size,count,type,redop,root,algorithm,", 0), 0u) << csv;
  EXPECT_FALSE(has(csv, "[rank")) << csv;
  // A header and the two sizes (8, 64), each row of the 15 columns.
  int lines = 0;
  for (char c : csv) lines += c == '\n';
  EXPECT_EQ(lines, 3) << csv;
  EXPECT_TRUE(has(csv, "\nallreduce,8,2,float32,sum,-1,")) << csv;
  EXPECT_TRUE(has(csv, "\nallreduce,64,16,float32,sum,-1,")) << csv;
}

}  // namespace
