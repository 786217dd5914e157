// The p2p scenarios over the ucx transport, once over UCX's tcp and once over its shared
// memory: rings of 2, 3 and 4 ranks across the eager/rendezvous threshold up to
// 64 MiB, any-source receives, many operations in flight, a killed peer, and the fall-back
// when UCX cannot be loaded. Skipped (with the reason) when the build has no UCX.
#include <signal.h>

#include <set>

#include "ucx/ucx_test_util.h"

namespace tpcomm::testing {
namespace {

using UcxP2P = UcxLaneTest;

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
        std::string log = log_to_rank_file(c);
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
        std::string text = read_file(log);
        EXPECT_TRUE(contains(text, "UCX_TLS=" + tls)) << text;
        EXPECT_TRUE(contains(text, "endpoint to rank")) << text;
        if (tls == "tcp") {
          EXPECT_TRUE(contains(text, "put as tagged messages")) << text;
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

INSTANTIATE_TEST_SUITE_P(Ucx, UcxP2P, kUcxLanes, lane_name);

// TPCOMM_UCX_PUT=rma forces ucp_put_nbx + flush + notification (auto keeps it for RDMA
// lanes): the bytes must land intact over UCX's shared memory, which emulates it.
TEST(UcxRma, ForcedPutIsCorrect) {
  if (!transport::has_transport("ucx")) GTEST_SKIP() << "this build has no UCX";
  RunOptions o;
  o.env = {{"TPCOMM_UCX_TLS", "shm,self"}, {"TPCOMM_UCX_PUT", "rma"}};
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "ucx");
        int peer = 1 - c.rank;
        int seed = 0;
        for (size_t bytes : {size_t(65536 + 8), size_t(300001), size_t(2) << 20}) {
          std::vector<uint8_t> out(bytes), in(bytes, 0xEE);
          fill_pattern(out, DType::UInt8, seed * 10 + c.rank);
          auto rw = pg->irecv(Tensor::of(in), peer, seed);
          pg->send(Tensor::of(out), peer, seed);
          rw->wait();
          ASSERT_EQ(check_pattern(in, DType::UInt8, seed * 10 + peer), -1) << bytes;
          ++seed;
        }
        pg->destroy();
      },
      o);
  EXPECT_RANKS_OK(r);
}

// A published address that is not a tpcomm UCX address, or names another rank, is refused
// with a message naming the rank; bad put ranges are InvalidArgument.
TEST(UcxUnit, BadAddressesAndRanges) {
  if (!transport::has_transport("ucx")) GTEST_SKIP() << "this build has no UCX";
  transport::TransportContext ctx;
  ctx.rank = 0;
  ctx.world_size = 2;
  ctx.job_id = "unit";
  ctx.store = std::make_shared<HashStore>();
  std::unique_ptr<transport::Transport> t;
  try {
    t = transport::create_transport("ucx", ctx);
  } catch (const NotSupportedError& e) {
    GTEST_SKIP() << e.what();
  }
  std::vector<uint8_t> junk(64, 7);
  auto now = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  EXPECT_TRUE(contains(error_of<TransportError>([&] { t->connect(1, junk, now); }),
                       "published by rank 1 is not a tpcomm UCX address"));
  std::vector<uint8_t> mine = t->address();  // rank 0's address offered as rank 1's
  EXPECT_TRUE(
      contains(error_of<TransportError>([&] { t->connect(1, mine, now); }), "belongs to rank 0"));
  ctx.rank = 1;
  auto t1 = transport::create_transport("ucx", ctx);
  auto& ep = t->connect(1, t1->address(), now);
  std::vector<uint8_t> a(100), b(100);
  auto ra = t->register_memory(a.data(), a.size(), Device::cpu());
  auto rb = t1->register_memory(b.data(), b.size(), Device::cpu());
  EXPECT_TRUE(contains(
      error_of<InvalidArgument>([&] { (void)ep.put(*ra, 0, rb->remote_key(), 50, 51, 1, 1); }),
      "outside rank 1's region of 100 bytes"));
  EXPECT_TRUE(contains(
      error_of<InvalidArgument>([&] { (void)ep.put(*ra, 90, rb->remote_key(), 0, 11, 1, 1); }),
      "outside the registered 100 bytes"));
  std::vector<uint8_t> big(1 << 20);
  iovec v{big.data(), big.size()};
  EXPECT_TRUE(contains(error_of<InvalidArgument>([&] {
                         (void)ep.send({&v, 1});
                       }),
                       "exceeds max_message"));
}

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
        std::string log = exchange_logging_links(c);
        EXPECT_TRUE(contains(log,
                             "transport ucx unavailable: ucx transport: cannot load "
                             "UCX library 'libucp-missing.so.0'"))
            << log;
        EXPECT_TRUE(contains(log, ": tcp")) << log;
      },
      o);
  EXPECT_RANKS_OK(r);
}

// With a shared secret (TPCOMM_AUTH_SECRET) UCX is not used: its own connections cannot
// prove the secret. "auto" falls back to an authenticated transport (saying why), and asking
// for ucx by name fails with an error naming the secret.
TEST(UcxFallback, SharedSecretKeepsUcxOut) {
  if (!transport::has_transport("ucx")) GTEST_SKIP() << "this build has no UCX";
  RunOptions o;
  o.env = {{"TPCOMM_AUTH_SECRET", "s3cret-for-this-test"},
           {"TPCOMM_TRANSPORT", "ucx,tcp"},
           {"TPCOMM_DEBUG", "info"},
           {"TPCOMM_DEBUG_SUBSYS", "p2p,topo"}};
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        std::string log = exchange_logging_links(c);
        EXPECT_TRUE(contains(log,
                             "TPCOMM_AUTH_SECRET is set and UCX's own connections "
                             "cannot prove it"))
            << log;
        EXPECT_TRUE(contains(log, ": tcp")) << log;
        // By name: a clear error, no hang.
        std::string err;
        try {
          InitOptions io;
          io.backend = "ucx";
          io.timeout = std::chrono::seconds(20);
          auto u = ProcessGroup::create(std::make_shared<PrefixStore>("ucx-named", c.store), c.rank,
                                        2, io);
          int32_t z = 0;
          u->send(Tensor::of(&z, 1), 1 - c.rank);
        } catch (const Error& e) {
          err = e.what();
        }
        EXPECT_TRUE(contains(err, "TPCOMM_AUTH_SECRET")) << err;
      },
      o);
  EXPECT_RANKS_OK(r);
}

}  // namespace
}  // namespace tpcomm::testing
