// tpinfo end to end: the report on stored machines, JSON output, and its error paths.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "core/json.h"
#include "topology/topo_test_util.h"

namespace tpcomm::topo {
namespace {

struct Result {
  int status = -1;
  std::string out;  // stdout and stderr together
};

// Runs bin/tpinfo with `args` (shell-quoted by the caller), bounded by timeout(1).
Result tpinfo(const std::string& args, const std::string& env = "") {
  std::string cmd =
      env + " timeout 120 " + std::string(TPCOMM_TEST_BIN_DIR) + "/tpinfo " + args + " 2>&1";
  Result r;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) r.out.append(buf, n);
  int st = pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

#define REQUIRE_SHARED()                                                                  \
  if (testing::shared_dir().empty()) {                                                    \
    GTEST_SKIP() << "../shared/topologies is absent: the stored machines are not tested"; \
  }

TEST(Tpinfo, ThisMachine) {
  Result r = tpinfo("");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "tpcomm 0.1.0 (build: ")) << r.out;
  EXPECT_TRUE(has(r.out, "Transports (this machine)"));
  EXPECT_TRUE(has(r.out, "  shm      built"));
  EXPECT_TRUE(has(r.out, "  tcp      built      usable"));
  EXPECT_TRUE(has(r.out, "source hwloc, host id "));
  EXPECT_TRUE(has(r.out, "TPCOMM_NET_GDR_LEVEL       (unset)        default 'pxb'"));
  EXPECT_TRUE(has(r.out, "TPCOMM_TOPO_FILE"));
}

TEST(Tpinfo, DellStoredMachine) {
  REQUIRE_SHARED();
  Result r = tpinfo("--topo " + testing::shared_dir() + "/dell-xe8640-4xH100-nvlink-4xmlx5-ib.xml");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "Topology (stored machine; nothing is bound)"));
  EXPECT_TRUE(has(r.out, "GPU  cuda0      4e:00.0  NVIDIA H100 80GB HBM3")) << r.out;
  EXPECT_TRUE(has(r.out, "  cuda0      PIX GDR     PIX GDR     NODE        SYS")) << r.out;
  EXPECT_TRUE(has(r.out, "  cuda2      SYS         SYS         SYS         NODE")) << r.out;
  EXPECT_TRUE(has(r.out, "No active port (the NIC choice skips them): mlx5_1, mlx5_2, mlx5_3"));
  EXPECT_TRUE(has(r.out, "GPUDirect yes: cuda0 and mlx5_0 share a PCIe switch")) << r.out;
}

TEST(Tpinfo, GdrLevelAndIbHcaFromTheEnvironment) {
  REQUIRE_SHARED();
  std::string file = testing::shared_dir() + "/dell-xe8640-4xH100-nvlink-4xmlx5-ib.xml";
  Result r = tpinfo("--topo " + file, "TPCOMM_NET_GDR_LEVEL=SYS TPCOMM_IB_HCA=^mlx5_1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "  cuda2      SYS GDR     SYS GDR     SYS GDR     NODE GDR")) << r.out;
  EXPECT_TRUE(has(r.out, "NIC choice (TPCOMM_IB_HCA='^mlx5_1', TPCOMM_NET_GDR_LEVEL=SYS)"));
  EXPECT_TRUE(has(r.out, "TPCOMM_IB_HCA              = ^mlx5_1")) << r.out;
  Result bad = tpinfo("--topo " + file, "TPCOMM_IB_HCA=mlx5_0:x");
  EXPECT_EQ(bad.status, 1);
  EXPECT_TRUE(has(bad.out, "tpinfo: TPCOMM_IB_HCA='mlx5_0:x' is malformed")) << bad.out;
  Result typo = tpinfo("--topo " + file, "TPCOMM_IB_HCAS=x");
  EXPECT_EQ(typo.status, 0);
  EXPECT_TRUE(has(typo.out,
                  "unknown variable TPCOMM_IB_HCAS is ignored; did you mean "
                  "TPCOMM_IB_HCA?"))
      << typo.out;
}

TEST(Tpinfo, JsonReportParses) {
  REQUIRE_SHARED();
  Result r = tpinfo("--json --topo " + testing::shared_dir() +
                    "/aws-g4dn.metal-8xT4-1efa-nic-on-socket1.xml");
  ASSERT_EQ(r.status, 0) << r.out;
  json::Json v = json::parse(r.out, "tpinfo --json");
  ASSERT_NE(json::find(v, "topology"), nullptr);
  EXPECT_EQ(topology_from_json(json::dump(v["topology"])).gpus.size(), 8u);
  const json::Json& pairs = json::as_array(v["gpu_nic"], "gpu_nic");
  ASSERT_EQ(pairs.size(), 8u);
  for (const json::Json& p : pairs) EXPECT_FALSE(json::as_bool(p["gdr"], "gdr"));
  EXPECT_FALSE(json::as_array(v["variables"], "variables").empty());
  EXPECT_EQ(json::as_array(v["transports"], "transports").size(), 4u);
}

TEST(Tpinfo, EveryStoredMachineAndFixtureReports) {
  std::vector<std::string> files = testing::fixture_files();
  for (const std::string& f : testing::shared_files()) files.push_back(f);
  for (const std::string& f : files) {
    Result r = tpinfo("--topo " + f);
    EXPECT_EQ(r.status, 0) << f << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "NIC choice")) << f;
  }
}

// Without its libxml2 plugin hwloc parses XML itself and refuses comments (licence headers of
// real exports); tpcomm strips them first.
TEST(Tpinfo, FilesWithCommentsLoadWithoutHwlocsLibxmlPlugin) {
  std::vector<std::string> files = {testing::fixture("two-socket-gpu-ib-roce.xml")};
  if (!testing::shared_dir().empty())
    files.push_back(testing::shared_dir() + "/aws-p5.48xlarge-8xH100-32efa-pcieswitch.xml");
  for (const std::string& f : files) {
    Result r = tpinfo("--topo " + f, "HWLOC_PLUGINS_PATH=/nonexistent");
    EXPECT_EQ(r.status, 0) << f << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "GPU x NIC")) << r.out;
  }
}

TEST(Tpinfo, ErrorsOfTheCommandLineAndOfLinksOutsideALauncher) {
  // --links outside a launcher: the rendezvous says what is missing (links_test.cc runs it
  // under a job).
  Result links = tpinfo("--links", "env -u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE");
  EXPECT_EQ(links.status, 1);
  EXPECT_TRUE(has(links.out, "env:// needs MASTER_ADDR")) << links.out;
  Result bad_timeout = tpinfo("--links --timeout soon");
  EXPECT_EQ(bad_timeout.status, 2);
  EXPECT_TRUE(has(bad_timeout.out, "--timeout needs a positive number, got 'soon'"))
      << bad_timeout.out;
  Result unknown = tpinfo("--frobnicate");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_TRUE(has(unknown.out, "unknown argument '--frobnicate'")) << unknown.out;
  EXPECT_TRUE(has(unknown.out, "usage: tpinfo"));
  Result missing = tpinfo("--topo");
  EXPECT_EQ(missing.status, 2);
  EXPECT_TRUE(has(missing.out, "--topo needs a file name"));
  Result nofile = tpinfo("--topo /nonexistent.xml");
  EXPECT_EQ(nofile.status, 1);
  EXPECT_TRUE(has(nofile.out, "cannot open topology file '/nonexistent.xml'")) << nofile.out;
  Result envfile = tpinfo("", "TPCOMM_TOPO_FILE=/nonexistent.xml");
  EXPECT_EQ(envfile.status, 1);
  EXPECT_TRUE(has(envfile.out, "cannot open topology file '/nonexistent.xml'")) << envfile.out;
  Result help = tpinfo("--help");
  EXPECT_EQ(help.status, 0);
  EXPECT_TRUE(has(help.out, "--topo FILE"));
}

}  // namespace
}  // namespace tpcomm::topo
