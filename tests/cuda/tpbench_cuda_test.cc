// tpbench --device cuda under tprun: buffers on the GPU (the fake driver in CI), data made and
// checked on the host, every operation staged through the process group; every row of the
// nccl-tests table must have #wrong 0.
#include <sys/wait.h>

#include <cstdio>
#include <sstream>
#include <string>

#include "cuda/cuda_test_util.h"

namespace tpcomm {
namespace {

// Runs tprun (`ranks` ranks, a free port) on tpbench with `args`; bounded by timeout(1). The
// ranks inherit TPCOMM_CUDA_LIB (the fake driver unless it was set).
std::string run_tpbench(int ranks, const std::string& args, int* status) {
  testing::select_cuda_driver();
  const std::string bin = TPCOMM_TEST_BIN_DIR;
  std::string cmd = "timeout -k 5 240 " + bin + "/tprun --nproc-per-node " + std::to_string(ranks) +
                    " --master-port 0 " + bin + "/tpbench " + args + " 2>&1";
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

// Rows of the table (rank 0's lines that are not comments), and how many have a #wrong that
// is not 0 (columns 9 and 13 of a row: out-of-place and in-place).
void count_rows(const std::string& out, int* rows, int* wrong) {
  *rows = *wrong = 0;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    const std::string prefix = "[rank 0]: ";
    if (line.rfind(prefix, 0) != 0) continue;
    line = line.substr(prefix.size());
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    std::vector<std::string> col;
    for (std::string c; f >> c;) col.push_back(c);
    if (col.size() < 10) continue;
    ++*rows;
    if (col[8] != "0" && col[8] != "N/A") ++*wrong;
    if (col.size() >= 14 && col[12] != "0" && col[12] != "N/A") ++*wrong;
  }
}

TEST(TpbenchCuda, AllreduceUnderTprun) {
  int st = 0;
  std::string out =
      run_tpbench(2, "--device cuda --collective allreduce -b 8 -e 1M -f 4 -n 3 -w 1", &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_TRUE(has(out, "2 ranks, transport shm")) << out;
  // The header's rank lines name each rank's GPU (LOCAL_RANK % 2 on the fake driver's two).
  EXPECT_TRUE(has(out, " device cuda:0 (CPUs ")) << out;
  EXPECT_TRUE(has(out, " device cuda:1 (CPUs ")) << out;
  EXPECT_TRUE(has(out, "staged")) << out;
  EXPECT_TRUE(has(out, "Out of bounds values : 0 OK")) << out;
  int rows = 0, wrong = 0;
  count_rows(out, &rows, &wrong);
  EXPECT_EQ(rows, 9) << out;  // 8 B .. 512 KiB by 4
  EXPECT_EQ(wrong, 0) << out;
}

TEST(TpbenchCuda, EveryOperationAndDTypeOverTcp) {
  int st = 0;
  std::string out = run_tpbench(
      3, "--device cuda --transport tcp --collective all -d all -b 8 -e 4K -f 512 -n 2 -w 1", &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_TRUE(has(out, "3 ranks, transport tcp")) << out;
  EXPECT_TRUE(has(out, "Out of bounds values : 0 OK")) << out;
  int rows = 0, wrong = 0;
  count_rows(out, &rows, &wrong);
  EXPECT_GT(rows, 9 * 10) << out;  // 9 operations x 10 dtypes x 2 sizes (+ redops)
  EXPECT_EQ(wrong, 0) << out;
}

// Runs a tpbench command line without a launcher; its exit status and output.
std::string run_alone(const std::string& args, int* status) {
  const std::string bin = TPCOMM_TEST_BIN_DIR;
  FILE* f = popen(("timeout -k 5 60 " + bin + "/tpbench " + args + " 2>&1").c_str(), "r");
  if (!f) {
    *status = -1;
    return "popen failed";
  }
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  *status = pclose(f);
  return out;
}

TEST(TpbenchCuda, BadDeviceOptionsAreRefused) {
  int st = 0;
  std::string out = run_tpbench(1, "--device gpu", &st);
  EXPECT_NE(st, 0);
  EXPECT_TRUE(has(out, "--device: gpu not in {cpu,cuda}")) << out;
  out = run_alone("--device cuda --threads 2", &st);
  ASSERT_TRUE(WIFEXITED(st)) << out;
  EXPECT_EQ(WEXITSTATUS(st), 2) << out;
  EXPECT_TRUE(has(out,
                  "tpbench: --device cuda runs under a launcher (tprun), one rank per process, "
                  "not -t 2"))
      << out;
  // Without a launcher the ranks are threads on host memory: refused, not run on the host.
  out = run_alone("--device cuda -t 1 -b 8 -e 8", &st);
  ASSERT_TRUE(WIFEXITED(st)) << out;
  EXPECT_EQ(WEXITSTATUS(st), 2) << out;
  EXPECT_TRUE(has(out,
                  "tpbench: --device cuda runs under a launcher (tprun), one rank per "
                  "process; without one the ranks are threads of this process on host "
                  "memory"))
      << out;
}

}  // namespace
}  // namespace tpcomm
