// The p2p scenarios over the ucx transport, once over UCX's tcp and once over its shared
// memory (issue 9): rings of 2, 3 and 4 ranks across the eager/rendezvous threshold up to
// 64 MiB, any-source receives, many operations in flight, a killed peer, and the fall-back
// when UCX cannot be loaded. Skipped (with the reason) when the build has no UCX.
#include <signal.h>

#include <fstream>
#include <set>
#include <sstream>

#include "p2p/p2p_test_util.h"

namespace tpcomm::testing {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

struct Lane {
  std::string name;  // test name part
  std::string tls;   // TPCOMM_UCX_TLS
};

class UcxP2P : public ::testing::TestWithParam<Lane> {
 protected:
  void SetUp() override {
    if (!transport::has_transport("ucx"))
      GTEST_SKIP() << "this build has no UCX (install libucx-dev and reconfigure)";
  }
  RunOptions opts() const {
    RunOptions o;
    o.timeout = std::chrono::seconds(120);
    o.env = {{"TPCOMM_UCX_TLS", GetParam().tls}, {"TPCOMM_TRANSPORT", "ucx"}};
    return o;
  }
};

// Each rank sends to the next and receives from the previous, sizes on both sides of the
// rendezvous threshold; 2 ranks also move 64 MiB.
void ring(int ranks, const RunOptions& o) {
  auto r = run_ranks(
      ranks,
      [&](RankContext& c) {
        auto pg = make_world(c, "ucx");
        int n = pg->size(), me = pg->rank();
        int next = (me + 1) % n, prev = (me + n - 1) % n;
        std::vector<size_t> sizes = {0, 1, 4096, 65536 - 40, 65536 + 8, 300001, 4 << 20};
        if (ranks == 2) sizes.push_back(64 << 20);
        int seed = 0;
        for (size_t bytes : sizes) {
          for (DType t : {DType::UInt8, DType::Float32}) {
            size_t nb = bytes / dtype_size(t) * dtype_size(t);
            if (bytes > (1 << 20) && t == DType::UInt8) continue;
            std::vector<uint8_t> out(nb), in(nb, 0xEE);
            fill_pattern(out, t, seed * 100 + me);
            auto rw = pg->irecv(as_tensor(in, t), prev, seed);
            auto sw = pg->isend(as_tensor(out, t), next, seed);
            sw->wait();
            rw->wait();
            ASSERT_EQ(rw->source_rank(), prev);
            ASSERT_EQ(check_pattern(in, t, seed * 100 + prev), -1)
                << nb << " bytes of " << dtype_name(t) << " from rank " << prev;
            ++seed;
          }
        }
        pg->destroy();
      },
      o);
  EXPECT_RANKS_OK(r);
}

TEST_P(UcxP2P, Ring2RanksUpTo64MiB) { ring(2, opts()); }
TEST_P(UcxP2P, Ring3Ranks) { ring(3, opts()); }
TEST_P(UcxP2P, Ring4Ranks) { ring(4, opts()); }

// Rank 0 receives from any source, small and rendezvous-sized; the log names the UCX lanes.
TEST_P(UcxP2P, AnySourceAndTheTransportIsUcx) {
  RunOptions o = opts();
  o.env["TPCOMM_DEBUG"] = "info";
  o.env["TPCOMM_DEBUG_SUBSYS"] = "p2p,ucx,topo";
  std::string tls = GetParam().tls;
  auto r = run_ranks(
      3,
      [&](RankContext& c) {
        std::string log = c.dir + "/rank" + std::to_string(c.rank) + ".log";
        setenv("TPCOMM_DEBUG_FILE", log.c_str(), 1);
        config::reload();
        log::reload();
        auto pg = make_world(c, "auto");
        if (c.rank == 0) {
          std::set<int> seen;
          for (int i = 0; i < 2; ++i) {
            int32_t v = -1;
            auto w = pg->irecv(Tensor::of(&v, 1), kAnySource, 3);
            w->wait();
            EXPECT_EQ(v, w->source_rank() * 10);
            seen.insert(w->source_rank());
          }
          EXPECT_EQ(seen, (std::set<int>{1, 2}));
          std::vector<int32_t> big(300000);
          for (int i = 0; i < 2; ++i) {
            auto w = pg->irecv(Tensor::of(big), kAnySource, 4);
            w->wait();
            EXPECT_EQ(big[299999], w->source_rank());
          }
        } else {
          int32_t v = c.rank * 10;
          pg->send(Tensor::of(&v, 1), 0, 3);
          std::vector<int32_t> big(300000, c.rank);
          pg->send(Tensor::of(big), 0, 4);
        }
        pg->destroy();
        std::ifstream f(log);
        std::stringstream ss;
        ss << f.rdbuf();
        EXPECT_TRUE(contains(ss.str(), "UCX_TLS=" + tls)) << ss.str();
        EXPECT_TRUE(contains(ss.str(), "endpoint to rank")) << ss.str();
        if (tls == "tcp") {
          EXPECT_TRUE(contains(ss.str(), "put as tagged messages")) << ss.str();
        }
      },
      o);
  EXPECT_RANKS_OK(r);
}

// Thousands of small sends and a few rendezvous ones in flight at once, both directions.
TEST_P(UcxP2P, ManyInFlight) {
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "ucx");
        int peer = 1 - c.rank;
        constexpr int kSmall = 3000, kBig = 8;
        std::vector<int32_t> out(kSmall), in(kSmall, -1);
        std::vector<std::vector<int32_t>> bout(kBig, std::vector<int32_t>(100000)),
            bin(kBig, std::vector<int32_t>(100000));
        std::vector<std::shared_ptr<Work>> ws;
        for (int i = 0; i < kSmall; ++i) {
          out[static_cast<size_t>(i)] = i * 2 + c.rank;
          ws.push_back(pg->irecv(Tensor::of(&in[static_cast<size_t>(i)], 1), peer, 1));
        }
        for (int i = 0; i < kBig; ++i) {
          std::fill(bout[static_cast<size_t>(i)].begin(), bout[static_cast<size_t>(i)].end(),
                    i * 10 + c.rank);
          ws.push_back(pg->irecv(Tensor::of(bin[static_cast<size_t>(i)]), peer, 2));
        }
        for (int i = 0; i < kSmall; ++i)
          ws.push_back(pg->isend(Tensor::of(&out[static_cast<size_t>(i)], 1), peer, 1));
        for (int i = 0; i < kBig; ++i)
          ws.push_back(pg->isend(Tensor::of(bout[static_cast<size_t>(i)]), peer, 2));
        for (auto& w : ws) w->wait();
        for (int i = 0; i < kSmall; ++i) ASSERT_EQ(in[static_cast<size_t>(i)], i * 2 + peer);
        for (int i = 0; i < kBig; ++i)
          ASSERT_EQ(bin[static_cast<size_t>(i)][99999], i * 10 + peer) << i;
        pg->destroy();
      },
      opts());
  EXPECT_RANKS_OK(r);
}

// A killed rank fails the other's pending receive, naming it, well before the timeout.
TEST_P(UcxP2P, KilledPeerFailsPendingRecvNamingIt) {
  RunOptions o = opts();
  o.may_die = {1};
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "ucx");
        int32_t x = c.rank, y = -1;
        auto rw = pg->irecv(Tensor::of(&y, 1), 1 - c.rank, 77);
        pg->send(Tensor::of(&x, 1), 1 - c.rank, 77);
        rw->wait();
        if (c.rank == 1) {
          c.store->wait({"posted"});
          raise(SIGKILL);
        }
        std::vector<float> buf(100000);
        auto w = pg->irecv(Tensor::of(buf), 1, 9);
        c.store->set("posted", "1");
        auto t0 = std::chrono::steady_clock::now();
        std::string err = error_of<PeerError>([&] { w->wait(std::chrono::seconds(30)); });
        EXPECT_TRUE(contains(err, "rank 1")) << err;
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(25)) << err;
        pg->destroy();
      },
      o);
  EXPECT_RANKS_OK(r);
}

INSTANTIATE_TEST_SUITE_P(Ucx, UcxP2P,
                         ::testing::Values(Lane{"tcp", "tcp"}, Lane{"shm", "shm,self"}),
                         [](const auto& info) { return info.param.name; });

// UCX missing at run time: the transport reports why and "auto" falls back to another.
TEST(UcxFallback, MissingLibraryFallsBackWithAReason) {
  if (!transport::has_transport("ucx")) GTEST_SKIP() << "this build has no UCX";
  RunOptions o;
  o.env = {{"TPCOMM_UCX_LIBRARY", "libucp-missing.so.0"},
           {"TPCOMM_TRANSPORT", "ucx,tcp"},
           {"TPCOMM_DEBUG", "info"},
           {"TPCOMM_DEBUG_SUBSYS", "p2p,topo"}};
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        std::string log = c.dir + "/rank" + std::to_string(c.rank) + ".log";
        setenv("TPCOMM_DEBUG_FILE", log.c_str(), 1);
        config::reload();
        log::reload();
        auto pg = make_world(c, "auto");
        int32_t x = c.rank, y = -1;
        auto rw = pg->irecv(Tensor::of(&y, 1), 1 - c.rank);
        pg->send(Tensor::of(&x, 1), 1 - c.rank);
        rw->wait();
        EXPECT_EQ(y, 1 - c.rank);
        pg->destroy();
        std::ifstream f(log);
        std::stringstream ss;
        ss << f.rdbuf();
        EXPECT_TRUE(contains(ss.str(),
                             "transport ucx unavailable: ucx transport: cannot load "
                             "UCX library 'libucp-missing.so.0'"))
            << ss.str();
        EXPECT_TRUE(contains(ss.str(), ": tcp")) << ss.str();
      },
      o);
  EXPECT_RANKS_OK(r);
}

}  // namespace
}  // namespace tpcomm::testing
