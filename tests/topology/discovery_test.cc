// Discovery and loading: every stored machine loads into the expected Topology value, the
// JSON encoding round-trips, and loading a file never changes what the real machine reports.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "core/config.h"
#include "topology/topo_test_util.h"
#include "tpcomm/error.hpp"

namespace tpcomm::topo {
namespace {

using testing::fixture;
using testing::load_shared;
using testing::ScopedEnv;
using testing::shared_dir;
using testing::shared_files;

#define REQUIRE_SHARED()                                                                  \
  if (shared_dir().empty()) {                                                             \
    GTEST_SKIP() << "../shared/topologies is absent: the stored machines are not tested"; \
  }

std::set<std::string> nic_names(const Topology& t) {
  std::set<std::string> s;
  for (const Nic& n : t.nics) s.insert(n.name);
  return s;
}

TEST(Discovery, EveryStoredMachineLoadsAndRoundTrips) {
  REQUIRE_SHARED();
  std::vector<std::string> files = shared_files();
  ASSERT_FALSE(files.empty());
  std::vector<std::string> all = files;
  for (const std::string& f : testing::fixture_files()) all.push_back(f);
  for (const std::string& f : all) {
    SCOPED_TRACE(f);
    Topology t = load_file(f);
    EXPECT_EQ(t.source, "xml:" + f);
    EXPECT_EQ(t.host_id, local_host_id());
    EXPECT_FALSE(t.packages.empty());
    EXPECT_FALSE(t.numa_nodes.empty());
    std::string j = to_json(t);
    EXPECT_EQ(j.find('\n'), std::string::npos) << "the default form is compact";
    EXPECT_EQ(j.rfind("{\"format\":\"tpcomm-topology\",\"version\":1,", 0), 0u) << j;
    EXPECT_NE(to_json(t, 2).find("\n  \"version\": 1,\n"), std::string::npos);
    Topology back = topology_from_json(j);
    EXPECT_EQ(back, t);
    EXPECT_EQ(to_json(back), j);
    EXPECT_EQ(to_json(topology_from_json(to_json(t, 2))), j) << "pretty form parses the same";
    EXPECT_FALSE(format_tree(t).empty());
    for (const Gpu& g : t.gpus) {
      EXPECT_FALSE(g.pci.path.empty()) << g.label() << " has no PCI path";
      EXPECT_NE(g.pci.path.front().find('['), std::string::npos)
          << g.label() << ": the path starts at the host bridge";
    }
  }
}

TEST(Discovery, DellXe8640Devices) {
  REQUIRE_SHARED();
  Topology t = load_shared("dell-xe8640-4xH100-nvlink-4xmlx5-ib.xml");
  EXPECT_EQ(t.packages.size(), 2u);
  EXPECT_EQ(t.numa_nodes.size(), 8u);
  EXPECT_EQ(t.pus, 224);
  ASSERT_EQ(t.gpus.size(), 4u);
  // Ordered by CUDA index, which does not follow PCI order here.
  EXPECT_EQ(t.gpus[0].label(), "cuda0");
  EXPECT_EQ(t.gpus[0].pci.busid, "0000:4e:00.0");
  EXPECT_EQ(t.gpus[1].pci.busid, "0000:5f:00.0");
  EXPECT_EQ(t.gpus[0].pci.numa, 3);
  EXPECT_EQ(t.gpus[0].pci.package, 0);
  EXPECT_EQ(t.gpus[2].pci.numa, 7);
  EXPECT_EQ(t.gpus[2].pci.package, 1);
  EXPECT_EQ(t.gpus[0].model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(t.gpus[0].nvml_index, 0);
  EXPECT_EQ(t.gpus[0].nvlink_peers.size(), 3u) << "NVLinkBandwidth matrix: all pairs linked";
  EXPECT_EQ(nic_names(t), (std::set<std::string>{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}));
  const Nic* m0 = t.find_nic("mlx5_0");
  ASSERT_NE(m0, nullptr);
  EXPECT_EQ(m0->kind, "ib");
  EXPECT_EQ(m0->pci.busid, "0000:4d:00.0");
  ASSERT_EQ(m0->ports.size(), 1u);
  EXPECT_EQ(m0->ports[0].state, 4);
  EXPECT_EQ(m0->ports[0].link_layer, "InfiniBand");
  EXPECT_EQ(m0->netdevs, std::vector<std::string>{"hsi0"});
  bool eno = false;
  for (const NetIf& n : t.netifs) eno |= n.name == "eno8303" && n.rdma_device.empty();
  EXPECT_TRUE(eno);
}

TEST(Discovery, AwsMachinesHaveEfaNics) {
  REQUIRE_SHARED();
  Topology g4 = load_shared("aws-g4dn.metal-8xT4-1efa-nic-on-socket1.xml");
  EXPECT_EQ(g4.gpus.size(), 8u);
  ASSERT_EQ(g4.nics.size(), 1u);
  EXPECT_EQ(g4.nics[0].name, "rdmap197s0");
  EXPECT_EQ(g4.nics[0].kind, "efa");
  EXPECT_EQ(g4.nics[0].pci.package, 1);
  Topology p5 = load_shared("aws-p5.48xlarge-8xH100-32efa-pcieswitch.xml");
  EXPECT_EQ(p5.gpus.size(), 8u) << "found by PCI class although only OpenCL OS devices exist";
  EXPECT_EQ(p5.gpus[0].label(), "opencl0d0");
  EXPECT_EQ(p5.nics.size(), 32u);
  EXPECT_EQ(p5.pus, 0) << "the p5 export has no PU objects";
}

TEST(Discovery, DgxNvSwitchAndCpuOnlyAndLaptop) {
  REQUIRE_SHARED();
  Topology dgx = load_shared("nvidia-dgx2h-16xV100-nvswitch-nvlink-noNIC.xml");
  ASSERT_EQ(dgx.gpus.size(), 16u) << "NVSwitch functions are not GPUs";
  for (const Gpu& g : dgx.gpus) {
    EXPECT_TRUE(g.nvswitch) << g.label();
    EXPECT_EQ(g.cuda_index, -1);
    EXPECT_EQ(g.label().substr(0, 4), "nvml");
  }
  EXPECT_TRUE(dgx.nics.empty());
  Topology cpu = load_shared("gigabyte-2s-xeonmax9462-snc4-1xmlx5-cpuonly.xml");
  EXPECT_TRUE(cpu.gpus.empty());
  ASSERT_EQ(cpu.nics.size(), 1u);
  EXPECT_EQ(cpu.nics[0].pci.numa, 2);
  EXPECT_EQ(cpu.nics[0].pci.package, 0);
  EXPECT_EQ(cpu.numa_nodes.size(), 8u);
  Topology laptop = load_shared("hp-elitebook840g1-laptop-1s2c-eth-wifi.xml");
  EXPECT_TRUE(laptop.gpus.empty()) << "an Intel iGPU is not a compute GPU";
  EXPECT_TRUE(laptop.nics.empty());
  EXPECT_EQ(laptop.netifs.size(), 2u);
  EXPECT_EQ(laptop.hostname, "maiantheme");
}

TEST(Discovery, HandWrittenFixtures) {
  Topology t = load_file(fixture("two-socket-gpu-ib-roce.xml"));
  ASSERT_EQ(t.gpus.size(), 2u);
  ASSERT_EQ(t.nics.size(), 3u);
  EXPECT_EQ(t.find_nic("mlx5_0")->kind, "ib");
  EXPECT_EQ(t.find_nic("mlx5_1")->kind, "roce");
  EXPECT_EQ(t.find_nic("mlx5_1")->ports[0].link_layer, "Ethernet");
  EXPECT_FALSE(t.find_nic("mlx5_2")->any_port_active());
  EXPECT_EQ(t.gpus[0].os_devices, (std::vector<std::string>{"cuda0", "nvml0"}));
  EXPECT_EQ(t.gpus[0].pci.path, (std::vector<std::string>{"0000:[00-05]", "0000:00:01.0",
                                                          "0000:01:00.0", "0000:02:00.0"}));
  EXPECT_EQ(t.hostname, "fixture-2s");
  EXPECT_EQ(t.cpu_model, "Fixture CPU");

  Topology v1 = load_file(fixture("one-socket-v1.xml"));
  ASSERT_EQ(v1.gpus.size(), 1u);
  EXPECT_EQ(v1.gpus[0].label(), "gpu@0000:01:00.0");
  EXPECT_EQ(v1.gpus[0].pci.class_id, 0x0300);
  ASSERT_EQ(v1.nics.size(), 1u);
  EXPECT_EQ(v1.nics[0].kind, "ib") << "class 0c06 is InfiniBand";
  ASSERT_EQ(v1.nics[0].ports.size(), 2u);
  EXPECT_TRUE(v1.nics[0].ports[0].active());
  EXPECT_FALSE(v1.nics[0].ports[1].active());
  ASSERT_EQ(v1.numa_nodes.size(), 1u);
  EXPECT_EQ(v1.numa_nodes[0].package, 0) << "v1 puts the NUMA node above the package";
}

TEST(Discovery, RealMachineIsUnchangedByLoadingAFile) {
  Topology before = discover();
  EXPECT_EQ(before.source, "hwloc");
  std::vector<int> cpus_before = current_cpus();
  for (const std::string& f : testing::fixture_files()) load_file(f);
  if (!shared_dir().empty())
    for (const std::string& f : shared_files()) load_file(f);
  Topology after = discover();
  EXPECT_EQ(after, before) << "discovery after loading stored files still sees this machine";
  EXPECT_EQ(after.host_id, local_host_id());
  EXPECT_EQ(current_cpus(), cpus_before) << "loading never binds the process";
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(after.hostname, host);
}

TEST(Discovery, HostIdComesFromTheEnvironmentOrTheMachine) {
  {
    ScopedEnv e("TPCOMM_HOSTID", "fake-host-7");
    EXPECT_EQ(local_host_id(), "fake-host-7");
    EXPECT_EQ(load_file(fixture("one-socket-v1.xml")).host_id, "fake-host-7");
  }
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(local_host_id().rfind(host, 0), 0u) << local_host_id();
}

TEST(Discovery, TopoFileAndDumpFileVariables) {
  char dir[] = "/tmp/tpcomm-topo-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string json_dump = std::string(dir) + "/dump-%p.json";
  std::string xml_dump = std::string(dir) + "/dump.xml";
  std::string expanded = std::string(dir) + "/dump-" + std::to_string(getpid()) + ".json";
  {
    ScopedEnv f("TPCOMM_TOPO_FILE", fixture("two-socket-gpu-ib-roce.xml").c_str());
    ScopedEnv d("TPCOMM_TOPO_DUMP_FILE", json_dump.c_str());
    Topology t = load_configured();
    EXPECT_EQ(t.hostname, "fixture-2s");
    // The JSON dump loads back as the same machine.
    Topology back = load_file(expanded);
    EXPECT_EQ(back.source, "json:" + expanded);
    back.source = t.source;
    EXPECT_EQ(back, t);
  }
  {
    ScopedEnv f("TPCOMM_TOPO_FILE", fixture("two-socket-gpu-ib-roce.xml").c_str());
    ScopedEnv d("TPCOMM_TOPO_DUMP_FILE", xml_dump.c_str());
    Topology t = load_configured();
    Topology again = load_file(xml_dump);
    again.source = t.source;
    EXPECT_EQ(again, t) << "an XML dump reloads as the same machine";
  }
  {
    ScopedEnv f("TPCOMM_TOPO_FILE", expanded.c_str());
    ScopedEnv d("TPCOMM_TOPO_DUMP_FILE", xml_dump.c_str());
    try {
      load_configured();
      ADD_FAILURE() << "XML dump of a JSON topology must fail";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("name the dump *.json"), std::string::npos) << e.what();
    }
  }
  unlink(expanded.c_str());
  unlink(xml_dump.c_str());
  ASSERT_EQ(rmdir(dir), 0);
}

TEST(Discovery, BadFilesSayWhatIsWrong) {
  try {
    load_file("/nonexistent/machine.xml");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open topology file '/nonexistent/machine.xml'"),
              std::string::npos)
        << e.what();
  }
  try {
    load_xml_buffer("<topology version=\"3.0\"><object type=\"Machine\"/></topology>", "v3.xml");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("v3.xml is not a topology hwloc can load"),
              std::string::npos)
        << e.what();
  }
  try {
    load_xml_buffer("this is not xml", "junk");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("junk"), std::string::npos) << e.what();
  }
  try {
    topology_from_json("{\"format\":\"other\",\"version\":1}", "dump.json");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("dump.json is not a tpcomm topology"), std::string::npos)
        << e.what();
  }
  try {
    topology_from_json(
        "{\"format\":\"tpcomm-topology\",\"version\":1,\"gpus\":[{\"pci\":{\"vendor_id\":70000}}]}",
        "dump.json");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("dump.json.gpus[0].pci.vendor_id is out of range"),
              std::string::npos)
        << e.what();
  }
}

TEST(Discovery, CpuListsAndBinding) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list(""), std::vector<int>{});
  EXPECT_THROW(parse_cpu_list("3-1"), InvalidArgument);
  EXPECT_THROW(parse_cpu_list("a"), InvalidArgument);
  EXPECT_THROW(parse_cpu_list("1,"), InvalidArgument);
  Topology t = load_file(fixture("two-socket-gpu-ib-roce.xml"));
  EXPECT_EQ(numa_of_cpus(t, {0, 1}), 0);
  EXPECT_EQ(numa_of_cpus(t, {3}), 1);
  EXPECT_EQ(numa_of_cpus(t, {1, 2}), -1) << "spanning two nodes is not bound to one";
  EXPECT_EQ(numa_of_cpus(t, {}), -1);
  Topology real = discover();
  if (real.numa_nodes.size() == 1) {
    EXPECT_EQ(numa_of_cpus(real, current_cpus()), real.numa_nodes[0].os_index);
  }
}

}  // namespace
}  // namespace tpcomm::topo
