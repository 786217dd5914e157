// Multi-rail over the test device: with two NICs (tpfake0, tpfake1) a rank opens one
// rail per NIC, large transfers are striped over both (the device's per-NIC counters show
// each carried about half), results are byte-exact at 2 and 4 ranks up to 64 MiB, one NIC's
// QPs forced into error fail the transfer naming that NIC; and the rail choice itself
// (choose_rails) on stored topologies: nearest NICs only, TPCOMM_IB_MAX_RAILS, TPCOMM_IB_HCA.
#include <dlfcn.h>
#include <unistd.h>

#include <map>

#include "../ibverbs_device/fake_verbs.h"
#include "p2p/p2p_test_util.h"
#include "tpcomm/store.hpp"
#include "transports/ibverbs/rails.h"

namespace tpcomm::testing {
namespace {

const char* kFake = TPCOMM_TEST_BIN_DIR "/libtpcomm_fake_verbs.so";

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The test device's hooks, resolved in this process (the transport dlopens the same file).
struct Hooks {
  void* h = nullptr;
  int (*set_devices)(int) = nullptr;
  int (*stats)(const char*, tpfake_stats*) = nullptr;
  void (*reset)() = nullptr;
  int (*force_device)(const char*) = nullptr;
  Hooks() {
    h = dlopen(kFake, RTLD_NOW);
    if (h == nullptr) return;
    set_devices = reinterpret_cast<int (*)(int)>(dlsym(h, "tpfake_set_device_count"));
    stats = reinterpret_cast<int (*)(const char*, tpfake_stats*)>(dlsym(h, "tpfake_get_stats"));
    reset = reinterpret_cast<void (*)()>(dlsym(h, "tpfake_reset_stats"));
    force_device = reinterpret_cast<int (*)(const char*)>(dlsym(h, "tpfake_force_device_error"));
  }
  tpfake_stats of(const char* dev) const {
    tpfake_stats s{};
    stats(dev, &s);
    return s;
  }
};

RunOptions rail_opts() {
  RunOptions o;
  o.timeout = std::chrono::seconds(120);
  o.env = {{"TPCOMM_IBVERBS_LIB", kFake}, {"TPCOMM_TRANSPORT", "ibverbs"}};
  return o;
}

class IbvRails : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!transport::has_transport("ibverbs"))
      GTEST_SKIP() << "this build has no ibverbs transport (no rdma-core headers)";
    if (access(kFake, R_OK) != 0) GTEST_SKIP() << "the test device " << kFake << " is not built";
  }
  static RunOptions opts() { return rail_opts(); }
};

// Ring exchange of `sizes` over two rails; each rank then checks that both NICs sent data and
// that the larger share is at most twice the smaller (stripes alternate rails).
void ring_two_rails(int ranks, const std::vector<size_t>& sizes) {
  auto r = run_ranks(
      ranks,
      [&](RankContext& c) {
        Hooks k;
        ASSERT_TRUE(k.set_devices && k.stats && k.reset);
        ASSERT_EQ(k.set_devices(2), 0);
        k.reset();
        auto pg = make_world(c, "ibverbs");
        int n = pg->size(), me = pg->rank();
        int next = (me + 1) % n, prev = (me + n - 1) % n;
        int seed = 0;
        for (size_t any : sizes) {
          size_t bytes = any / 4 * 4;
          std::vector<uint8_t> out(bytes), in(bytes, 0xEE);
          fill_pattern(out, DType::Float32, seed * 100 + me);
          auto rw = pg->irecv(as_tensor(in, DType::Float32), prev, seed);
          auto sw = pg->isend(as_tensor(out, DType::Float32), next, seed);
          sw->wait();
          rw->wait();
          ASSERT_EQ(check_pattern(in, DType::Float32, seed * 100 + prev), -1)
              << bytes << " bytes from rank " << prev;
          ++seed;
        }
        tpfake_stats s0 = k.of("tpfake0"), s1 = k.of("tpfake1");
        size_t big = sizes.back();
        EXPECT_GE(s0.tx_bytes, big / 3) << "tpfake0 carried " << s0.tx_bytes;
        EXPECT_GE(s1.tx_bytes, big / 3) << "tpfake1 carried " << s1.tx_bytes;
        EXPECT_LE(std::max(s0.tx_bytes, s1.tx_bytes),
                  2 * std::min(s0.tx_bytes, s1.tx_bytes) + 65536)
            << "tpfake0 " << s0.tx_bytes << ", tpfake1 " << s1.tx_bytes;
        pg->destroy();
      },
      rail_opts());
  EXPECT_RANKS_OK(r);
}

TEST_F(IbvRails, TwoRanksTwoRailsUpTo64MiB) {
  ring_two_rails(2, {0, 100, 32768 + 8, 300001, 4 << 20, 64 << 20});
}

TEST_F(IbvRails, FourRanksTwoRails) { ring_two_rails(4, {1, 65536, 1 << 20, 8 << 20}); }

// Two ranks exchanging 4 MiB with two NICs listed; `env` restricts them. Returns nothing: each
// rank checks which NIC carried the data.
void one_nic(const std::map<std::string, std::string>& env, const char* used, const char* idle) {
  RunOptions o = rail_opts();
  for (auto& [k, v] : env) o.env[k] = v;
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        Hooks k;
        ASSERT_EQ(k.set_devices(2), 0);
        k.reset();
        auto pg = make_world(c, "ibverbs");
        std::vector<uint8_t> out(4 << 20, static_cast<uint8_t>(c.rank)), in(4 << 20);
        auto rw = pg->irecv(as_tensor(in, DType::UInt8), 1 - c.rank, 1);
        pg->send(as_tensor(out, DType::UInt8), 1 - c.rank, 1);
        rw->wait();
        EXPECT_EQ(in[12345], 1 - c.rank);
        EXPECT_GE(k.of(used).tx_bytes, 4u << 20);
        EXPECT_EQ(k.of(idle).tx_bytes, 0u);
        pg->destroy();
      },
      o);
  EXPECT_RANKS_OK(r);
}

// TPCOMM_IB_MAX_RAILS=1: one rail even with two NICs; tpfake1 carries nothing.
TEST_F(IbvRails, MaxRailsOneUsesOneNic) {
  one_nic({{"TPCOMM_IB_MAX_RAILS", "1"}}, "tpfake0", "tpfake1");
}

// TPCOMM_IB_HCA still filters: only the NIC it names becomes a rail.
TEST_F(IbvRails, HcaFilterChoosesTheRails) {
  one_nic({{"TPCOMM_IB_HCA", "=tpfake1"}}, "tpfake1", "tpfake0");
}

// One NIC failing (its QPs forced into the error state) fails the next large transfer, and
// the error names that NIC.
TEST_F(IbvRails, OneRailInErrorFailsTheTransferNamingTheNic) {
  RunOptions o = opts();
  o.env["TPCOMM_IB_TIMEOUT"] = "14";
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        Hooks k;
        ASSERT_EQ(k.set_devices(2), 0);
        auto pg = make_world(c, "ibverbs");
        int32_t x = c.rank, y = -1;
        auto rw = pg->irecv(Tensor::of(&y, 1), 1 - c.rank, 7);
        pg->send(Tensor::of(&x, 1), 1 - c.rank, 7);
        rw->wait();
        c.store->set("connected/" + std::to_string(c.rank), "1");
        c.store->wait({"connected/0", "connected/1"}, std::chrono::seconds(30));
        std::vector<uint8_t> buf(8 << 20, 1);
        if (c.rank == 0) {
          EXPECT_GT(k.force_device("tpfake1"), 0);
          std::string err = error_of<PeerError>([&] {
            pg->isend(as_tensor(buf, DType::UInt8), 1, 8)->wait(std::chrono::seconds(60));
          });
          EXPECT_TRUE(contains(err, "tpfake1:1")) << err;
          EXPECT_TRUE(contains(err, "rank 1")) << err;
          c.store->set("checked", "1");
        } else {  // rank 1 only waits: it has nothing in flight that could notice
          c.store->wait({"checked"}, std::chrono::seconds(90));
        }
      },
      o);
  EXPECT_RANKS_OK(r);
}

// ---- the rail choice on stored topologies ------------------------------------------------

ibv::PortInfo port(const std::string& dev, int p = 1) {
  ibv::PortInfo i;
  i.device = dev;
  i.port = p;
  i.attr.state = IBV_PORT_ACTIVE;
  return i;
}

topo::Topology two_sockets() {
  topo::Topology t;
  t.numa_nodes = {{0, 0, "0-7", 0}, {1, 1, "8-15", 0}};
  auto nic = [](const std::string& name, int numa, const std::string& bridge) {
    topo::Nic n;
    n.name = name;
    n.kind = "roce";
    n.pci.busid = "0000:" + bridge + ":00.0";
    n.pci.numa = numa;
    n.pci.package = numa;
    n.pci.path = {"0000:[" + bridge + "-" + bridge + "]"};
    return n;
  };
  t.nics = {nic("mlx5_0", 0, "10"), nic("mlx5_1", 0, "20"), nic("mlx5_2", 1, "80")};
  return t;
}

TEST(IbvRailChoice, NearestNicsOnlyOnePortEach) {
  topo::Topology t = two_sockets();
  std::vector<ibv::PortInfo> ports = {port("mlx5_0", 1), port("mlx5_0", 2), port("mlx5_1"),
                                      port("mlx5_2")};
  std::string why;
  auto r = ibv::choose_rails(ports, &t, 0, 0, &why);
  ASSERT_EQ(r.size(), 2u) << why;
  EXPECT_EQ(r[0].device, "mlx5_0");
  EXPECT_EQ(r[0].port, 1);
  EXPECT_EQ(r[1].device, "mlx5_1");
  EXPECT_TRUE(contains(why, "mlx5_2")) << why;
  r = ibv::choose_rails(ports, &t, 1, 0, &why);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].device, "mlx5_2");
  r = ibv::choose_rails(ports, &t, -1, 0, &why);  // unbound: all at SYS, all used
  EXPECT_EQ(r.size(), 3u) << why;
  r = ibv::choose_rails(ports, &t, 0, 1, &why);  // TPCOMM_IB_MAX_RAILS=1
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(contains(why, "TPCOMM_IB_MAX_RAILS=1")) << why;
}

TEST(IbvRailChoice, UnknownDevicesCountOnlyWhenTheTopologyKnowsNone) {
  topo::Topology t = two_sockets();
  std::string why;
  auto r = ibv::choose_rails({port("tpfake0"), port("tpfake1")}, &t, 0, 0, &why);
  EXPECT_EQ(r.size(), 2u) << why;
  EXPECT_TRUE(contains(why, "equal distance")) << why;
  r = ibv::choose_rails({port("tpfake0"), port("mlx5_2")}, &t, 0, 0, &why);
  ASSERT_EQ(r.size(), 1u) << why;
  EXPECT_EQ(r[0].device, "mlx5_2");
  EXPECT_TRUE(contains(why, "tpfake0 unknown")) << why;
  r = ibv::choose_rails({port("tpfake0"), port("tpfake1")}, nullptr, -1, 0, &why);
  EXPECT_EQ(r.size(), 2u);
}

}  // namespace
}  // namespace tpcomm::testing
