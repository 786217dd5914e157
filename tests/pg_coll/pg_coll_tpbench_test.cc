// Tier (c): tpbench under tprun (the README's main job) runs its sweep as two processes over
// the process-group collectives, over shm by default and over tcp with -t tcp.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace {

// Runs tprun (2 ranks, a free port) on tpbench with `args`; bounded by timeout(1).
std::string run_tpbench(const std::string& args, int* status) {
  const std::string bin = TPCOMM_TEST_BIN_DIR;
  std::string cmd = "timeout -k 5 120 " + bin + "/tprun --nproc-per-node 2 --master-port 0 " + bin +
                    "/tpbench " + args + " 2>&1";
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

  out = run_tpbench("-t tcp -b 8 -e 64K -f 64 -n 3 -w 1 -o allreduce,allgather", &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_TRUE(has(out, "2 ranks, transport tcp")) << out;
  EXPECT_FALSE(has(out, "shm_direct")) << out;
  EXPECT_TRUE(has(out, "Out of bounds values : 0 OK")) << out;

  out = run_tpbench("-t tcp -o sendrecv -b 8 -e 64K -f 64 -n 3 -w 1", &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_TRUE(has(out, "p2p")) << out;
}

}  // namespace
