// tpinfo end to end: the report on stored machines, JSON output, and its error paths.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/json.h"
#include "topology/topo_test_util.h"
#include "tpcomm/version.hpp"

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

#if TPCOMM_HAVE_IBVERBS
// The probe opens the library the transport would: TPCOMM_IBVERBS_LIB (the test device here).
TEST(Tpinfo, IbverbsProbeHonoursTheLibraryVariable) {
  Result r = tpinfo(
      "", "TPCOMM_IBVERBS_LIB=" + std::string(TPCOMM_TEST_BIN_DIR) + "/libtpcomm_fake_verbs.so");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "  ibverbs  built      usable      devices: tpfake0")) << r.out;
  r = tpinfo("", "TPCOMM_IBVERBS_LIB=/nonexistent/libibverbs.so");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "/nonexistent/libibverbs.so cannot be loaded: ")) << r.out;
}
#endif

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
  EXPECT_TRUE(has(bad.out, "tpinfo: error: TPCOMM_IB_HCA='mlx5_0:x' is malformed")) << bad.out;
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
  EXPECT_TRUE(has(links.out, "tpinfo: error: env:// needs MASTER_ADDR")) << links.out;
  Result bad_timeout = tpinfo("--links --timeout soon");
  EXPECT_EQ(bad_timeout.status, 2);
  EXPECT_TRUE(has(bad_timeout.out,
                  "tpinfo: --timeout: 'soon' is not a positive number; run 'tpinfo --help'"))
      << bad_timeout.out;
  Result unknown = tpinfo("--frobnicate");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_TRUE(has(unknown.out,
                  "tpinfo: The following argument was not expected: --frobnicate; run 'tpinfo "
                  "--help' for usage"))
      << unknown.out;
  Result missing = tpinfo("--topo");
  EXPECT_EQ(missing.status, 2);
  EXPECT_TRUE(has(missing.out, "tpinfo: --topo: 1 required FILE missing")) << missing.out;
  Result nofile = tpinfo("--topo /nonexistent.xml");
  EXPECT_EQ(nofile.status, 1);
  EXPECT_TRUE(has(nofile.out, "cannot open topology file '/nonexistent.xml'")) << nofile.out;
  Result envfile = tpinfo("", "TPCOMM_TOPO_FILE=/nonexistent.xml");
  EXPECT_EQ(envfile.status, 1);
  EXPECT_TRUE(has(envfile.out,
                  "tpinfo: error: TPCOMM_TOPO_FILE='/nonexistent.xml' cannot be read: No such "
                  "file or directory. Fix or unset it.\n"))
      << envfile.out;
  Result help = tpinfo("--help");
  EXPECT_EQ(help.status, 0);
  EXPECT_TRUE(has(help.out, "--topo FILE"));
  EXPECT_TRUE(has(help.out, "usage: tpinfo"));
  Result version = tpinfo("--version");
  EXPECT_EQ(version.status, 0);
  EXPECT_TRUE(has(version.out, "tpinfo (tpcomm 0.1.0; build: ")) << version.out;
}

std::string read_file(const std::string& path) {
  std::string out;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

// A scratch folder removed with its files at the end of the scope.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/tpinfo_graph_XXXXXX";
    if (mkdtemp(tmpl)) path = tmpl;
  }
  ~TempDir() {
    if (!path.empty()) std::system(("rm -rf '" + path + "'").c_str());
  }
};

// The graph of every stored machine and fixture holds each package, NUMA node, bridge, GPU and
// NIC as the tree they are, and one bold edge per GPU to the NIC the topology layer picks for
// it, labelled GPUDirect or staged as the pick says; the same picture renders to SVG.
TEST(TpinfoGraph, EveryStoredMachineAndFixtureAsDotAndSvg) {
  std::vector<std::string> files = testing::fixture_files();
  for (const std::string& f : testing::shared_files()) files.push_back(f);
  TempDir tmp;
  ASSERT_FALSE(tmp.path.empty());
  bool have_dot = std::system("command -v dot >/dev/null 2>&1") == 0;
  NicOptions opts = NicOptions::from_config();
  for (const std::string& f : files) {
    Topology t = load_file(f);
    std::string dot_path = tmp.path + "/t.dot";
    Result r = tpinfo("--topo " + f + " --graph " + dot_path);
    ASSERT_EQ(r.status, 0) << f << "\n" << r.out;
    EXPECT_EQ(r.out, "tpinfo: wrote " + dot_path + "\n");
    std::string dot = read_file(dot_path);
    ASSERT_TRUE(has(dot, "digraph topology {")) << f;
    EXPECT_EQ(dot.substr(dot.size() - 2), "}\n") << f;
    for (const Package& p : t.packages)
      EXPECT_TRUE(has(dot, "\"machine\" -> \"package" + std::to_string(p.os_index) + "\""));
    for (const NumaNode& n : t.numa_nodes)
      EXPECT_TRUE(has(dot, "\"numa" + std::to_string(n.os_index) + "\" [label=\"NUMA ")) << f;
    auto check_path = [&](const PciDevice& d, const std::string& id) {
      std::string parent;
      for (const std::string& b : d.path) {
        if (!parent.empty()) {
          EXPECT_TRUE(has(dot, parent + " -> \"pci:" + b + "\"")) << f << b;
        }
        parent = "\"pci:" + b + "\"";
      }
      if (!parent.empty()) {
        EXPECT_TRUE(has(dot, parent + " -> \"" + id + "\"")) << f << " " << id;
      }
    };
    for (const Gpu& g : t.gpus) {
      std::string id = "gpu:" + g.pci.busid + ":" + g.label();
      EXPECT_TRUE(has(dot, "\"" + id + "\" [label=\"" + g.label() + "\\n")) << f;
      check_path(g.pci, id);
      NicPick p = pick_nic_for_gpu(t, g, opts);
      if (p.nic.empty()) continue;
      std::string edge = "\"" + id + "\" -> \"nic:" + p.nic + "\" [constraint=false, style=bold";
      EXPECT_TRUE(has(dot, edge)) << f << " " << edge;
      EXPECT_TRUE(has(dot, std::string("label=\"") + (p.gdr ? "GPUDirect " : "staged ") +
                               relation_name(p.relation) + "\""))
          << f;
    }
    for (const Nic& n : t.nics) {
      EXPECT_TRUE(has(dot, "\"nic:" + n.name + "\" [label=\"" + n.name + " (" + n.kind + ")")) << f;
      check_path(n.pci, "nic:" + n.name);
    }
    EXPECT_TRUE(has(dot, "\"why\" [shape=note")) << f;
    if (!have_dot) continue;
    std::string svg_path = tmp.path + "/t.svg";
    Result s = tpinfo("--topo " + f + " --graph " + svg_path);
    ASSERT_EQ(s.status, 0) << f << "\n" << s.out;
    std::string svg = read_file(svg_path);
    EXPECT_EQ(svg.rfind("<?xml", 0), 0u) << f;
    EXPECT_TRUE(has(svg, "</svg>")) << f;
    for (const Gpu& g : t.gpus) EXPECT_TRUE(has(svg, ">" + g.label() + "</text>")) << f;
    for (const Nic& n : t.nics) EXPECT_TRUE(has(svg, ">" + n.name + " (" + n.kind + ")</text>"));
  }
  if (!have_dot) GTEST_SKIP() << "Graphviz's dot is not installed (tools/setup.sh installs it)";
}

TEST(TpinfoGraph, BadNamesFailClearly) {
  std::string f = testing::fixture("two-socket-gpu-ib-roce.xml");
  Result png = tpinfo("--topo " + f + " --graph /tmp/x.png");
  EXPECT_EQ(png.status, 1);
  EXPECT_TRUE(has(png.out, "--graph '/tmp/x.png': name the picture *.svg or *.dot")) << png.out;
  Result none = tpinfo("--topo " + f + " --graph");
  EXPECT_EQ(none.status, 2);
  EXPECT_TRUE(has(none.out, "tpinfo: --graph: 1 required OUT missing; run 'tpinfo --help'"))
      << none.out;
  Result dir = tpinfo("--topo " + f + " --graph /nonexistent/dir/t.dot");
  EXPECT_EQ(dir.status, 1);
  EXPECT_TRUE(has(dir.out, "cannot write '/nonexistent/dir/t.dot'")) << dir.out;
}

}  // namespace
}  // namespace tpcomm::topo
