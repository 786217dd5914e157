// The p2p scenarios over the ibverbs transport, on the loopback test device
// (TPCOMM_IBVERBS_LIB=<bin>/libtpcomm_fake_verbs.so): rings of 2, 3, 4 and 8 ranks across the
// eager/rendezvous threshold (64 MiB with 2 ranks), many operations in flight (credits), a
// killed peer, a wrong rkey and a QP forced into the error state. Skipped with the reason when
// the build has no ibverbs transport or the test device was not built.
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include "p2p/p2p_test_util.h"
#include "tpcomm/store.hpp"

namespace tpcomm::testing {
namespace {

const char* kFake = TPCOMM_TEST_BIN_DIR "/libtpcomm_fake_verbs.so";

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

class IbvP2P : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!transport::has_transport("ibverbs"))
      GTEST_SKIP() << "this build has no ibverbs transport (no rdma-core headers)";
    if (access(kFake, R_OK) != 0) GTEST_SKIP() << "the test device " << kFake << " is not built";
  }
  static RunOptions opts() {
    RunOptions o;
    o.timeout = std::chrono::seconds(120);
    o.env = {{"TPCOMM_IBVERBS_LIB", kFake}, {"TPCOMM_TRANSPORT", "ibverbs"}};
    return o;
  }
};

void ring(int ranks, std::vector<size_t> sizes, const RunOptions& o) {
  auto r = run_ranks(
      ranks,
      [&](RankContext& c) {
        auto pg = make_world(c, "ibverbs");
        int n = pg->size(), me = pg->rank();
        int next = (me + 1) % n, prev = (me + n - 1) % n;
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

const std::vector<size_t> kSizes = {0, 1, 4096, 32768 - 40, 32768 + 8, 300001, 4 << 20};

TEST_F(IbvP2P, Ring2RanksUpTo64MiB) {
  auto s = kSizes;
  s.push_back(64 << 20);
  ring(2, s, opts());
}
TEST_F(IbvP2P, Ring3Ranks) { ring(3, kSizes, opts()); }
TEST_F(IbvP2P, Ring4Ranks) { ring(4, kSizes, opts()); }
// Puts alternate over two QPs per peer; messages stay on the first.
TEST_F(IbvP2P, Ring3RanksTwoQpsPerPeer) {
  RunOptions o = opts();
  o.env["TPCOMM_IB_QPS_PER_CONNECTION"] = "2";
  ring(3, kSizes, o);
}
// Ranks that disagree on TPCOMM_IB_QPS_PER_CONNECTION fail the link at once, saying so.
TEST_F(IbvP2P, MismatchedQpCountFailsTheLinkNamingTheVariable) {
  RunOptions o = opts();
  o.rank_env = [](int rank) {
    return std::map<std::string, std::string>{
        {"TPCOMM_IB_QPS_PER_CONNECTION", rank == 0 ? "1" : "2"}};
  };
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "ibverbs");
        int32_t x = c.rank, y = -1;
        std::string err = error_of<PeerError>([&] {
          if (c.rank == 0)
            pg->isend(Tensor::of(&x, 1), 1, 5)->wait(std::chrono::seconds(30));
          else
            pg->irecv(Tensor::of(&y, 1), 0, 5)->wait(std::chrono::seconds(30));
        });
        EXPECT_TRUE(contains(err, "TPCOMM_IB_QPS_PER_CONNECTION")) << err;
        pg->destroy();
      },
      o);
  EXPECT_RANKS_OK(r);
}

TEST_F(IbvP2P, Ring8Ranks) { ring(8, {0, 100, 32768 + 8, 1 << 20}, opts()); }

// Thousands of small sends (credits: 32 receive slots per peer) and rendezvous ones in
// flight at once, both directions.
TEST_F(IbvP2P, ManyInFlight) {
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "ibverbs");
        int peer = 1 - c.rank;
        constexpr int kSmall = 2000, kBig = 8;
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

// A killed rank: the next send to it fails naming the rank as dead: with retry-exceeded,
// naming the NIC and the status in words, or first through the liveness watch (same host).
TEST_F(IbvP2P, KilledPeerFailsTheNextSendNamingIt) {
  RunOptions o = opts();
  o.may_die = {1};
  o.env["TPCOMM_IB_TIMEOUT"] = "16";  // a dead peer is noticed after ~2 s (default: ~8.6 s)
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "ibverbs");
        int32_t x = c.rank, y = -1;
        auto rw = pg->irecv(Tensor::of(&y, 1), 1 - c.rank, 77);
        pg->send(Tensor::of(&x, 1), 1 - c.rank, 77);
        rw->wait();
        if (c.rank == 1) {
          c.store->wait({"go"}, std::chrono::seconds(30));
          raise(SIGKILL);
        }
        c.store->set("go", "1");
        std::vector<float> buf(100000, 1.0f);
        std::string err;
        auto t0 = std::chrono::steady_clock::now();
        // Rank 1 kills itself now; eager sends may still be accepted until the link fails.
        for (int i = 0; i < 200 && err.empty(); ++i) {
          err = error_of<PeerError>(
              [&] { pg->isend(Tensor::of(buf), 1, 9 + i)->wait(std::chrono::seconds(30)); });
          if (err.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        EXPECT_TRUE(contains(err, "rank 1 is dead")) << err;
        // Whichever sees it first: the verbs completion (retries exhausted on the port), or the
        // liveness watch (the process on this host exited).
        EXPECT_TRUE((contains(err, "tpfake0:1") && contains(err, "retry")) ||
                    contains(err, "its process"))
            << err;
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60)) << err;
        pg->destroy();
      },
      o);
  EXPECT_RANKS_OK(r);
}

}  // namespace
}  // namespace tpcomm::testing
