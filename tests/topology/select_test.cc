// Relations, NIC choice, GPUDirect decisions and per-link transport selection on the stored
// machines of ../shared/topologies and on the fixtures of tests/topology/fixtures.
#include "topology/select.h"

#include <gtest/gtest.h>

#include "core/config.h"
#include "topology/topo_test_util.h"
#include "tpcomm/error.hpp"

namespace tpcomm::topo {
namespace {

using testing::fixture;
using testing::load_shared;
using testing::ranks_of;
using testing::ScopedEnv;
using testing::shared_dir;

#define REQUIRE_SHARED()                                                                  \
  if (shared_dir().empty()) {                                                             \
    GTEST_SKIP() << "../shared/topologies is absent: the stored machines are not tested"; \
  }

const std::vector<std::string> kAll = {"shm", "tcp", "ucx", "ibverbs"};
constexpr const char* kDell = "dell-xe8640-4xH100-nvlink-4xmlx5-ib.xml";
constexpr const char* kG4dn = "aws-g4dn.metal-8xT4-1efa-nic-on-socket1.xml";
constexpr const char* kP5 = "aws-p5.48xlarge-8xH100-32efa-pcieswitch.xml";
constexpr const char* kCpu = "gigabyte-2s-xeonmax9462-snc4-1xmlx5-cpuonly.xml";
constexpr const char* kDgx = "nvidia-dgx2h-16xV100-nvswitch-nvlink-noNIC.xml";

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

Summary rank_on(const Topology& t, const std::string& host, int rank, int local_rank,
                const std::string& gpu, int numa = -1, const NicOptions& o = NicOptions{}) {
  Topology h = t;
  h.host_id = host;
  Placement p;
  p.rank = rank;
  p.local_rank = local_rank;
  p.gpu = gpu;
  p.numa = gpu.empty() ? numa : h.find_gpu(gpu)->pci.numa;
  return make_summary(h, p, o, {});
}

// The Dell export was taken with only mlx5_0's port up; most tests want the cabled machine.
Topology all_ports_up(Topology t) {
  for (Nic& n : t.nics)
    for (NicPort& p : n.ports) p.state = 4;
  return t;
}

SelectOptions device_opts() {
  SelectOptions o;
  o.memory = Memory::Device;
  return o;
}

// ---- relations -----------------------------------------------------------------------------

TEST(Relations, DellGpuNicPairs) {
  REQUIRE_SHARED();
  Topology t = load_shared(kDell);
  const Gpu& cuda0 = *t.find_gpu("cuda0");
  EXPECT_EQ(pci_relation(cuda0.pci, t.find_nic("mlx5_0")->pci), Relation::PIX);
  EXPECT_EQ(pci_relation(cuda0.pci, t.find_nic("mlx5_1")->pci), Relation::PIX);
  EXPECT_EQ(pci_relation(cuda0.pci, t.find_nic("mlx5_2")->pci), Relation::NODE);
  EXPECT_EQ(pci_relation(cuda0.pci, t.find_nic("mlx5_3")->pci), Relation::SYS);
  EXPECT_EQ(pci_relation(t.find_gpu("cuda1")->pci, t.find_nic("mlx5_2")->pci), Relation::PIX);
  EXPECT_EQ(pci_relation(t.find_gpu("cuda3")->pci, t.find_nic("mlx5_3")->pci), Relation::PIX);
  // cuda2 has no NIC under its switch: every NIC is beyond PXB.
  const Gpu& cuda2 = *t.find_gpu("cuda2");
  for (const Nic& n : t.nics) EXPECT_GT(pci_relation(cuda2.pci, n.pci), Relation::PXB) << n.name;
  EXPECT_EQ(pci_relation(cuda2.pci, t.find_nic("mlx5_3")->pci), Relation::NODE);
  // Two functions of one card, and relations are symmetric.
  EXPECT_EQ(pci_relation(t.find_nic("mlx5_0")->pci, t.find_nic("mlx5_1")->pci), Relation::PIX);
  for (const Gpu& g : t.gpus)
    for (const Nic& n : t.nics) EXPECT_EQ(pci_relation(g.pci, n.pci), pci_relation(n.pci, g.pci));
}

TEST(Relations, G4dnAndP5AndDgx) {
  REQUIRE_SHARED();
  Topology g4 = load_shared(kG4dn);
  const Nic& efa = g4.nics[0];
  for (int i = 0; i < 8; ++i) {
    const Gpu& g = *g4.find_gpu("cuda" + std::to_string(i));
    EXPECT_EQ(pci_relation(g.pci, efa.pci), i < 4 ? Relation::SYS : Relation::NODE) << i;
  }
  // Each T4 has its own root port: neighbours share only the host bridge.
  EXPECT_EQ(pci_relation(g4.find_gpu("cuda0")->pci, g4.find_gpu("cuda1")->pci), Relation::PHB);
  Topology p5 = load_shared(kP5);
  for (const Gpu& g : p5.gpus) {
    int pix = 0;
    for (const Nic& n : p5.nics) pix += pci_relation(g.pci, n.pci) == Relation::PIX;
    EXPECT_EQ(pix, 4) << g.label() << " has 4 EFA devices under its switch";
  }
  Topology dgx = load_shared(kDgx);
  EXPECT_EQ(pci_relation(dgx.gpus[0].pci, dgx.gpus[1].pci), Relation::PIX);
  EXPECT_EQ(pci_relation(dgx.gpus[0].pci, dgx.gpus[2].pci), Relation::PXB);
}

TEST(Relations, LaptopBridgesOfDifferentDepthsDoNotCrash) {
  REQUIRE_SHARED();
  // hwloc 2.9's common-ancestor call segfaults on 02:00.0 vs 00:19.0 here; ours walks paths.
  Topology t = load_shared("hp-elitebook840g1-laptop-1s2c-eth-wifi.xml");
  const NetIf* eth = nullptr;
  const NetIf* wlan = nullptr;
  for (const NetIf& n : t.netifs) (n.name == "eth0" ? eth : wlan) = &n;
  ASSERT_TRUE(eth && wlan);
  EXPECT_EQ(pci_relation(eth->pci, wlan->pci), Relation::PHB);
}

// ---- NIC choice and GPUDirect ------------------------------------------------------------

TEST(NicChoice, DellGpuDirect) {
  REQUIRE_SHARED();
  Topology t = all_ports_up(load_shared(kDell));
  NicOptions o;
  NicPick p0 = pick_nic_for_gpu(t, *t.find_gpu("cuda0"), o);
  EXPECT_EQ(p0.nic, "mlx5_0");
  EXPECT_EQ(p0.relation, Relation::PIX);
  EXPECT_TRUE(p0.gdr) << p0.gdr_why;
  EXPECT_TRUE(has(p0.why, "2 devices at this distance (mlx5_0, mlx5_1)")) << p0.why;
  EXPECT_TRUE(has(p0.gdr_why, "share a PCIe switch")) << p0.gdr_why;
  EXPECT_EQ(pick_nic_for_gpu(t, *t.find_gpu("cuda1"), o).nic, "mlx5_2");
  EXPECT_EQ(pick_nic_for_gpu(t, *t.find_gpu("cuda3"), o).nic, "mlx5_3");
  NicPick p2 = pick_nic_for_gpu(t, *t.find_gpu("cuda2"), o);
  EXPECT_EQ(p2.nic, "mlx5_3");
  EXPECT_EQ(p2.relation, Relation::NODE);
  EXPECT_FALSE(p2.gdr);
  EXPECT_TRUE(has(p2.gdr_why, "NODE, beyond TPCOMM_NET_GDR_LEVEL=PXB")) << p2.gdr_why;
  EXPECT_TRUE(has(p2.gdr_why, "staged through host memory")) << p2.gdr_why;
}

TEST(NicChoice, GdrLevelOverride) {
  REQUIRE_SHARED();
  Topology t = all_ports_up(load_shared(kDell));
  const Gpu& cuda0 = *t.find_gpu("cuda0");
  const Gpu& cuda2 = *t.find_gpu("cuda2");
  {
    ScopedEnv e("TPCOMM_NET_GDR_LEVEL", "NODE");
    NicOptions o = NicOptions::from_config();
    EXPECT_EQ(o.gdr_level, Relation::NODE);
    EXPECT_TRUE(pick_nic_for_gpu(t, cuda2, o).gdr);
  }
  {
    ScopedEnv e("TPCOMM_NET_GDR_LEVEL", "4");  // NCCL's legacy SYS
    EXPECT_TRUE(pick_nic_for_gpu(t, cuda2, NicOptions::from_config()).gdr);
  }
  {
    ScopedEnv e("TPCOMM_NET_GDR_LEVEL", "loc");
    NicPick p = pick_nic_for_gpu(t, cuda0, NicOptions::from_config());
    EXPECT_FALSE(p.gdr);
    EXPECT_TRUE(has(p.gdr_why, "TPCOMM_NET_GDR_LEVEL=LOC disables GPUDirect")) << p.gdr_why;
  }
  {
    ScopedEnv e("TPCOMM_NET_GDR_LEVEL", "pix");
    EXPECT_TRUE(pick_nic_for_gpu(t, cuda0, NicOptions::from_config()).gdr);
  }
  {
    ScopedEnv e("TPCOMM_NET_GDR_LEVEL", "pcie");
    try {
      NicOptions::from_config();
      ADD_FAILURE();
    } catch (const ConfigError& err) {
      EXPECT_TRUE(has(err.what(), "TPCOMM_NET_GDR_LEVEL='pcie' is malformed")) << err.what();
    }
  }
  EXPECT_EQ(parse_gdr_level("0"), Relation::LOC);
  EXPECT_EQ(parse_gdr_level("1"), Relation::PIX);
  EXPECT_EQ(parse_gdr_level("2"), Relation::PXB);
  EXPECT_EQ(parse_gdr_level("3"), Relation::PHB);
  EXPECT_EQ(parse_gdr_level("5"), Relation::SYS);
  EXPECT_EQ(parse_gdr_level("Phb"), Relation::PHB);
  EXPECT_THROW(parse_gdr_level("-1"), ConfigError);
  EXPECT_THROW(parse_gdr_level(""), ConfigError);
}

TEST(NicChoice, AwsG4dnNoGpuGetsGpuDirect) {
  REQUIRE_SHARED();
  Topology t = load_shared(kG4dn);
  for (const Gpu& g : t.gpus) {
    NicPick p = pick_nic_for_gpu(t, g, NicOptions{});
    EXPECT_EQ(p.nic, "rdmap197s0");
    EXPECT_FALSE(p.gdr) << g.label() << ": " << p.gdr_why;
    EXPECT_TRUE(has(p.why, "efa device: not usable by the ibverbs transport")) << p.why;
  }
}

TEST(NicChoice, P5RailAlignment) {
  REQUIRE_SHARED();
  Topology t = load_shared(kP5);
  std::set<std::string> used;
  for (const Gpu& g : t.gpus) {
    NicPick p = pick_nic_for_gpu(t, g, NicOptions{});
    EXPECT_EQ(p.relation, Relation::PIX);
    EXPECT_TRUE(p.gdr);
    used.insert(p.nic);
  }
  EXPECT_EQ(used.size(), 8u) << "each GPU uses a NIC of its own switch";
}

TEST(NicChoice, DellAsStoredHasOnlyMlx50Up) {
  REQUIRE_SHARED();
  Topology t = load_shared(kDell);
  EXPECT_FALSE(t.find_nic("mlx5_2")->any_port_active());
  NicPick p1 = pick_nic_for_gpu(t, *t.find_gpu("cuda1"), NicOptions{});
  EXPECT_EQ(p1.nic, "mlx5_0");
  EXPECT_EQ(p1.relation, Relation::NODE);
  EXPECT_FALSE(p1.gdr);
  EXPECT_TRUE(has(p1.why, "nearer but not used: mlx5_2 (PIX, no active port)")) << p1.why;
  NicPick p2 = pick_nic_for_gpu(t, *t.find_gpu("cuda2"), NicOptions{});
  EXPECT_EQ(p2.nic, "mlx5_0");
  EXPECT_EQ(p2.relation, Relation::SYS);
  EXPECT_FALSE(p2.gdr);
  EXPECT_TRUE(pick_nic_for_gpu(t, *t.find_gpu("cuda0"), NicOptions{}).gdr);
}

TEST(NicChoice, RanksSpreadOverNicsAtEqualDistance) {
  REQUIRE_SHARED();
  Topology t = all_ports_up(load_shared(kDell));
  // mlx5_0 and mlx5_1 are both attached to NUMA node 3.
  EXPECT_EQ(pick_nic_for_numa(t, 3, 0, NicOptions{}).nic, "mlx5_0");
  EXPECT_EQ(pick_nic_for_numa(t, 3, 1, NicOptions{}).nic, "mlx5_1");
  EXPECT_EQ(pick_nic_for_numa(t, 3, 2, NicOptions{}).nic, "mlx5_0");
  EXPECT_EQ(pick_nic_for_numa(t, 1, 0, NicOptions{}).nic, "mlx5_2");
}

TEST(NicChoice, TwoSocketCpuNodeSocketLocalVersusCrossSocket) {
  REQUIRE_SHARED();
  Topology t = load_shared(kCpu);
  for (const NumaNode& n : t.numa_nodes) {
    NicPick p = pick_nic_for_numa(t, n.os_index, 0, NicOptions{});
    EXPECT_EQ(p.nic, "mlx5_0");
    if (n.os_index == 2) {
      EXPECT_EQ(p.relation, Relation::PHB);
      EXPECT_TRUE(has(p.why, "attached to this NUMA node")) << p.why;
    } else if (n.package == 0) {
      EXPECT_EQ(p.relation, Relation::NODE) << n.os_index;
      EXPECT_TRUE(has(p.why, "same package")) << p.why;
    } else {
      EXPECT_EQ(p.relation, Relation::SYS) << n.os_index;
      EXPECT_TRUE(has(p.why, "crosses the inter-socket link")) << p.why;
    }
  }
  NicPick unbound = pick_nic_for_numa(t, -1, 0, NicOptions{});
  EXPECT_EQ(unbound.relation, Relation::SYS);
  EXPECT_TRUE(has(unbound.why, "not bound")) << unbound.why;
}

TEST(NicChoice, FixtureSkipsDownPortsAndPrefersVerbsDevices) {
  Topology t = load_file(fixture("two-socket-gpu-ib-roce.xml"));
  NicPick p1 = pick_nic_for_gpu(t, *t.find_gpu("cuda1"), NicOptions{});
  // mlx5_2 shares cuda1's host bridge but its only port is down.
  EXPECT_EQ(p1.nic, "mlx5_1");
  EXPECT_EQ(p1.relation, Relation::NODE);
  EXPECT_EQ(p1.kind, "roce");
  NicPick p0 = pick_nic_for_gpu(t, *t.find_gpu("cuda0"), NicOptions{});
  EXPECT_EQ(p0.nic, "mlx5_0");
  EXPECT_EQ(p0.port, 1);
  EXPECT_TRUE(p0.gdr);
}

// ---- TPCOMM_IB_HCA -------------------------------------------------------------------------

TEST(IbHca, Parsing) {
  HcaFilter f = parse_ib_hca("mlx5_0,mlx5_1");
  EXPECT_FALSE(f.exclude);
  EXPECT_FALSE(f.exact);
  ASSERT_EQ(f.entries.size(), 2u);
  EXPECT_TRUE(f.allows("mlx5_0", 1));
  EXPECT_TRUE(f.allows("mlx5_10", 1)) << "prefix match, as NCCL";
  EXPECT_FALSE(f.allows("mlx5_2", -1));
  HcaFilter x = parse_ib_hca("^mlx5_3");
  EXPECT_TRUE(x.exclude);
  EXPECT_FALSE(x.allows("mlx5_3", 1));
  EXPECT_FALSE(x.allows("mlx5_30", -1));
  EXPECT_TRUE(x.allows("mlx5_0", 1));
  HcaFilter e = parse_ib_hca("=mlx5_1");
  EXPECT_TRUE(e.exact);
  EXPECT_TRUE(e.allows("mlx5_1", 1));
  EXPECT_FALSE(e.allows("mlx5_10", 1));
  HcaFilter p = parse_ib_hca("mlx5_0:1");
  EXPECT_EQ(p.entries[0].port, 1);
  EXPECT_TRUE(p.allows("mlx5_0", 1));
  EXPECT_FALSE(p.allows("mlx5_0", 2));
  EXPECT_TRUE(p.allows("mlx5_0", -1));
  HcaFilter xe = parse_ib_hca("^=mlx5_0:2");
  EXPECT_TRUE(xe.exclude && xe.exact);
  EXPECT_TRUE(xe.allows("mlx5_0", 1));
  EXPECT_FALSE(xe.allows("mlx5_0", 2));
  EXPECT_TRUE(parse_ib_hca("").empty());
  EXPECT_TRUE(parse_ib_hca("  ").allows("anything", 1));
  for (const char* bad :
       {"^", "=", "mlx5_0,,mlx5_1", "mlx5_0:x", "mlx5_0:0", ":1", "mlx5_0,^mlx5_1", "mlx5_0:1:2"}) {
    try {
      parse_ib_hca(bad);
      ADD_FAILURE() << bad;
    } catch (const ConfigError& err) {
      EXPECT_TRUE(has(err.what(), "TPCOMM_IB_HCA='" + std::string(bad) + "' is malformed"))
          << err.what();
    }
  }
}

TEST(IbHca, RestrictsTheChoice) {
  REQUIRE_SHARED();
  Topology t = all_ports_up(load_shared(kDell));
  const Gpu& cuda0 = *t.find_gpu("cuda0");
  {
    ScopedEnv e("TPCOMM_IB_HCA", "^mlx5_0");
    EXPECT_EQ(pick_nic_for_gpu(t, cuda0, NicOptions::from_config()).nic, "mlx5_1");
  }
  {
    ScopedEnv e("TPCOMM_IB_HCA", "=mlx5_3");
    NicPick p = pick_nic_for_gpu(t, cuda0, NicOptions::from_config());
    EXPECT_EQ(p.nic, "mlx5_3");
    EXPECT_EQ(p.relation, Relation::SYS);
    EXPECT_FALSE(p.gdr);
  }
  {
    ScopedEnv e("TPCOMM_IB_HCA", "mlx5_0:2");  // mlx5_0 has only port 1
    NicPick p = pick_nic_for_gpu(t, cuda0, NicOptions::from_config());
    EXPECT_EQ(p.nic, "");
    EXPECT_TRUE(has(p.why, "no RDMA device passes TPCOMM_IB_HCA='mlx5_0:2'")) << p.why;
  }
}

// ---- link selection ------------------------------------------------------------------------

TEST(SelectLink, DellTwoHostsUseIbverbsWithGpuDirectWhereTheSwitchAllows) {
  REQUIRE_SHARED();
  Topology t = all_ports_up(load_shared(kDell));
  Summary a0 = rank_on(t, "A", 0, 0, "cuda0");
  Summary a2 = rank_on(t, "A", 2, 2, "cuda2");
  Summary b0 = rank_on(t, "B", 4, 0, "cuda0");
  LinkChoice c = select_link(a0, b0, kAll, device_opts());
  EXPECT_EQ(c.transport, "ibverbs");
  EXPECT_EQ(c.nic, "mlx5_0");
  EXPECT_TRUE(c.gdr);
  EXPECT_EQ(c.peer_nic, "mlx5_0");
  EXPECT_TRUE(c.peer_gdr);
  EXPECT_TRUE(has(c.reason, "different hosts 'A' and 'B'")) << c.reason;
  LinkChoice d = select_link(a2, b0, kAll, device_opts());
  EXPECT_EQ(d.transport, "ibverbs");
  EXPECT_EQ(d.nic, "mlx5_3");
  EXPECT_FALSE(d.gdr);
  EXPECT_TRUE(d.peer_gdr);
  EXPECT_TRUE(has(d.reason, "no GPUDirect")) << d.reason;
  // Host memory uses the NUMA node's NIC.
  LinkChoice h = select_link(a2, b0, kAll, SelectOptions{});
  EXPECT_EQ(h.nic, "mlx5_3") << "NUMA 7 is on package 1 with mlx5_3";
  EXPECT_FALSE(h.gdr);
  // Without ibverbs, UCX; without UCX, TCP.
  EXPECT_EQ(select_link(a0, b0, {"shm", "tcp", "ucx"}, SelectOptions{}).transport, "ucx");
  LinkChoice tcp = select_link(a0, b0, {"shm", "tcp"}, SelectOptions{});
  EXPECT_EQ(tcp.transport, "tcp");
  EXPECT_TRUE(has(tcp.reason, "not ibverbs (not built in or not usable here")) << tcp.reason;
}

TEST(SelectLink, SameHostUsesShmWithCudaIpcWhereGpusReachEachOther) {
  REQUIRE_SHARED();
  Topology dell = load_shared(kDell);
  LinkChoice c = select_link(rank_on(dell, "A", 0, 0, "cuda0"), rank_on(dell, "A", 1, 1, "cuda2"),
                             kAll, device_opts());
  EXPECT_EQ(c.transport, "shm");
  EXPECT_TRUE(c.cuda_ipc);
  EXPECT_TRUE(has(c.reason, "NVLink")) << c.reason;
  Topology g4 = load_shared(kG4dn);
  LinkChoice s = select_link(rank_on(g4, "A", 0, 0, "cuda0"), rank_on(g4, "A", 4, 4, "cuda4"), kAll,
                             device_opts());
  EXPECT_EQ(s.transport, "shm");
  EXPECT_FALSE(s.cuda_ipc);
  EXPECT_TRUE(has(s.reason, "staged through host shared memory")) << s.reason;
  EXPECT_TRUE(has(s.reason, "SYS")) << s.reason;
  Topology dgx = load_shared(kDgx);
  LinkChoice n =
      select_link(rank_on(dgx, "A", 0, 0, dgx.gpus[0].pci.busid),
                  rank_on(dgx, "A", 15, 15, dgx.gpus[15].pci.busid), kAll, device_opts());
  EXPECT_TRUE(n.cuda_ipc);
  EXPECT_TRUE(has(n.reason, "NVSwitch")) << n.reason;
  // Host memory on one host: plain shm.
  LinkChoice h = select_link(rank_on(g4, "A", 0, 0, "", 0), rank_on(g4, "A", 1, 1, "", 1), kAll,
                             SelectOptions{});
  EXPECT_EQ(h.transport, "shm");
  EXPECT_EQ(h.reason, "shm: same host 'A'");
}

TEST(SelectLink, AwsEfaIsNotUsedByVerbs) {
  REQUIRE_SHARED();
  Topology g4 = load_shared(kG4dn);
  LinkChoice c = select_link(rank_on(g4, "A", 0, 0, "cuda4"), rank_on(g4, "B", 1, 0, "cuda4"), kAll,
                             device_opts());
  EXPECT_EQ(c.transport, "ucx");
  EXPECT_FALSE(c.gdr);
  EXPECT_TRUE(has(c.reason, "EFA")) << c.reason;
  EXPECT_TRUE(has(c.reason, "GPU memory staged through host memory")) << c.reason;
}

TEST(SelectLink, TwoSocketCpuNodeReportsTheSocketCrossing) {
  REQUIRE_SHARED();
  Topology t = load_shared(kCpu);
  Summary near = rank_on(t, "A", 0, 0, "", 2);
  Summary far = rank_on(t, "A", 1, 1, "", 5);
  Summary peer = rank_on(t, "B", 2, 0, "", 2);
  LinkChoice cn = select_link(near, peer, kAll, SelectOptions{});
  LinkChoice cf = select_link(far, peer, kAll, SelectOptions{});
  EXPECT_EQ(cn.transport, "ibverbs");
  EXPECT_EQ(cf.transport, "ibverbs");
  EXPECT_TRUE(has(cn.reason, "rank 0 mlx5_0:1 (PHB to NUMA 2)")) << cn.reason;
  EXPECT_TRUE(has(cf.reason, "rank 1 mlx5_0:1 (SYS to NUMA 5)")) << cf.reason;
  EXPECT_TRUE(has(far.host_nic.why, "crosses the inter-socket link")) << far.host_nic.why;
}

TEST(SelectLink, ForcingAndExcluding) {
  REQUIRE_SHARED();
  Topology t = load_shared(kDell);
  Summary a = rank_on(t, "A", 0, 0, "cuda0");
  Summary a1 = rank_on(t, "A", 1, 1, "cuda1");
  Summary b = rank_on(t, "B", 2, 0, "cuda0");
  {
    ScopedEnv e("TPCOMM_TRANSPORT", "tcp");
    SelectOptions o = SelectOptions::from_config();
    LinkChoice c = select_link(a, b, kAll, o);
    EXPECT_EQ(c.transport, "tcp");
    EXPECT_TRUE(has(c.reason, "TPCOMM_TRANSPORT=tcp")) << c.reason;
    EXPECT_EQ(select_link(a, a1, kAll, o).transport, "tcp");
  }
  {
    ScopedEnv e("TPCOMM_TRANSPORT", "^ibverbs");
    LinkChoice c = select_link(a, b, kAll, SelectOptions::from_config());
    EXPECT_EQ(c.transport, "ucx");
    EXPECT_TRUE(has(c.reason, "ibverbs (excluded by TPCOMM_TRANSPORT)")) << c.reason;
  }
  {
    ScopedEnv e("TPCOMM_TRANSPORT", "shm");
    LinkChoice c = select_link(a, b, kAll, SelectOptions::from_config());
    EXPECT_FALSE(c.ok());
    EXPECT_TRUE(has(c.reason, "no transport can join rank 0 and rank 2: shm (different hosts"))
        << c.reason;
  }
  {
    ScopedEnv e("TPCOMM_TRANSPORT", "SHM,bogus");
    EXPECT_THROW(SelectOptions::from_config(), ConfigError);
  }
  {
    ScopedEnv e("TPCOMM_SHM_DISABLE", "1");
    LinkChoice c = select_link(a, a1, kAll, SelectOptions::from_config(Memory::Device));
    EXPECT_EQ(c.transport, "ibverbs") << "loopback through the NIC, as NCCL without SHM";
    EXPECT_TRUE(has(c.reason, "shm (TPCOMM_SHM_DISABLE is set)")) << c.reason;
    EXPECT_EQ(select_link(a, a1, {"shm", "tcp"}, SelectOptions::from_config()).transport, "tcp");
  }
  // A transport a peer cannot use is skipped.
  Summary limited = a1;
  limited.transports = {"tcp"};
  LinkChoice c = select_link(a, limited, kAll, SelectOptions{});
  EXPECT_EQ(c.transport, "tcp");
  EXPECT_TRUE(has(c.reason, "shm (not usable at rank 1)")) << c.reason;
}

// Builds, for every stored machine and fixture, two hosts of it plus a host of the next
// machine, and checks that every pair of ranks gets the same answer from both ends.
TEST(SelectLink, SymmetricOverEveryPairOfEveryFile) {
  std::vector<std::string> files = testing::fixture_files();
  const std::vector<std::string> shared = testing::shared_files();
  for (const std::string& f : shared) files.push_back(f);
  std::vector<Topology> machines;
  for (const std::string& f : files) machines.push_back(load_file(f));
  std::vector<SelectOptions> options(4);
  options[1].memory = Memory::Device;
  options[2].shm_disable = true;
  options[2].memory = Memory::Device;
  options[3].exclude = {"ibverbs"};
  size_t pairs = 0;
  for (size_t m = 0; m < machines.size(); ++m) {
    SCOPED_TRACE(files[m]);
    std::vector<Summary> ranks = ranks_of(machines[m], "hostA", 0);
    std::vector<Summary> b = ranks_of(machines[m], "hostB", 1000);
    std::vector<Summary> c = ranks_of(machines[(m + 1) % machines.size()], "hostC", 2000);
    ranks.insert(ranks.end(), b.begin(), b.end());
    ranks.insert(ranks.end(), c.begin(), c.end());
    for (const Summary& x : ranks) {
      for (const Summary& y : ranks) {
        for (const SelectOptions& o : options) {
          LinkChoice xy = select_link(x, y, kAll, o);
          LinkChoice yx = select_link(y, x, kAll, o);
          ASSERT_EQ(xy.transport, yx.transport) << x.rank << " " << y.rank;
          ASSERT_EQ(xy.reason, yx.reason);
          ASSERT_EQ(xy.cuda_ipc, yx.cuda_ipc);
          ASSERT_EQ(xy.nic, yx.peer_nic);
          ASSERT_EQ(xy.port, yx.peer_port);
          ASSERT_EQ(xy.gdr, yx.peer_gdr);
          ASSERT_EQ(xy.peer_gdr, yx.gdr);
          ASSERT_TRUE(xy.ok()) << xy.reason;
          ++pairs;
        }
      }
    }
  }
  // With the shared machines there are well over 1000 pairs; the fixtures alone give fewer.
  EXPECT_GT(pairs, shared.empty() ? 100u : 1000u);
}

// ---- summaries -------------------------------------------------------------------------------

TEST(Summary, RoundTripsAndStaysSmall) {
  std::vector<std::string> files = testing::fixture_files();
  for (const std::string& f : testing::shared_files()) files.push_back(f);
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    for (const Summary& s : ranks_of(load_file(f), "h", 0)) {
      std::string text = summary_to_string(s);
      EXPECT_LT(text.size(), 64u << 10);
      Summary back = summary_from_string(text);
      EXPECT_EQ(back, s);
      EXPECT_EQ(summary_to_string(back), text);
    }
  }
}

TEST(Summary, BadInputIsRefusedWithItsLocation) {
  Topology t = load_file(fixture("two-socket-gpu-ib-roce.xml"));
  Summary s = rank_on(t, "h", 3, 0, "cuda0");
  std::string text = summary_to_string(s);
  auto expect_error = [](const std::string& input, const std::string& part) {
    try {
      summary_from_string(input, "summary of rank 3");
      ADD_FAILURE() << "accepted: " << input;
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(has(e.what(), part)) << e.what();
    }
  };
  expect_error(text.substr(0, text.size() / 2), "summary of rank 3: malformed JSON at offset");
  expect_error("[]", "summary of rank 3 must be an object");
  expect_error("{\"format\":\"tpcomm-summary\",\"version\":2}",
               "is not a tpcomm topology summary (format 'tpcomm-summary' version 2");
  std::string bad_rel = text;
  bad_rel.replace(bad_rel.find("\"PIX\""), 5, "\"FAR\"");
  expect_error(bad_rel, "summary of rank 3.gpu_nic.relation is not a relation: 'FAR'");
  std::string bad_gpu = text;
  bad_gpu.replace(bad_gpu.find("\"gpu\":\"0000:03:00.0\""), 20, "\"gpu\":\"0000:99:00.0\"");
  expect_error(bad_gpu, "gpu '0000:99:00.0' is not among its gpus");
  try {
    Placement p;
    p.gpu = "cuda9";
    make_summary(t, p, NicOptions{}, {});
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(has(e.what(),
                    "uses GPU 'cuda9', which this host's topology does not have "
                    "(GPUs: cuda0, cuda1)"))
        << e.what();
  }
}

TEST(Summary, LocalSummaryOfThisProcess) {
  Topology t = discover();
  Summary s = local_summary(t, 5, 1, "", {"shm", "tcp"});
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.local_rank, 1);
  EXPECT_EQ(s.host_id, local_host_id());
  EXPECT_EQ(s.numa, numa_of_cpus(t, current_cpus()));
  EXPECT_EQ(s.transports, (std::vector<std::string>{"shm", "tcp"}));
  EXPECT_THROW(local_summary(t, 0, 0, "cuda99", {}), InvalidArgument);
}

TEST(Summary, DescribeNamesBothEnds) {
  Topology t = load_file(fixture("two-socket-gpu-ib-roce.xml"));
  Summary a = rank_on(t, "A", 0, 0, "cuda0");
  Summary b = rank_on(t, "B", 1, 0, "cuda0");
  LinkChoice c = select_link(a, b, kAll, device_opts());
  std::string d = describe(a, b, c);
  EXPECT_TRUE(has(d, "rank 0 -> rank 1: ibverbs on mlx5_0:1 (GPUDirect) to mlx5_0:1 (GPUDirect)"))
      << d;
  // RoCE on one end and InfiniBand on the other cannot talk verbs.
  Summary r = rank_on(t, "C", 2, 1, "cuda1");
  LinkChoice x = select_link(a, r, kAll, device_opts());
  EXPECT_EQ(x.transport, "ucx");
  EXPECT_TRUE(has(x.reason, "link layers differ")) << x.reason;
}

}  // namespace
}  // namespace tpcomm::topo
