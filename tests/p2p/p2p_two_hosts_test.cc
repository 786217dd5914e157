// Tier (b): a two-"host" job on one machine. Ranks 0 and 1 claim host A at 127.0.0.2,
// ranks 2 and 3 host B at 127.0.0.3 (TPCOMM_HOSTID, TPCOMM_SOCKET_ADDR). Links within a
// host use shm, links between hosts tcp, and each rank's log says so.

#include "net/socket.h"
#include "p2p/p2p_test_util.h"

namespace tpcomm::testing {
namespace {

TEST(TwoHosts, ShmWithinAHostTcpBetweenHosts) {
  if (!transport::has_transport("shm") || !transport::has_transport("tcp"))
    GTEST_SKIP() << "needs both the shm and tcp transports";
  RunOptions opt;
  // Between hosts the topology prefers ibverbs, then UCX, then tcp; this test is about tcp
  // (tests/topology/links_test.cc checks the UCX choice where UCX is usable).
  opt.env = {{"TPCOMM_DEBUG", "info"},
             {"TPCOMM_DEBUG_SUBSYS", "p2p,tcp"},
             {"TPCOMM_TRANSPORT", "^ucx,^ibverbs"}};
  opt.rank_env = [](int rank) {
    std::map<std::string, std::string> e;
    e["TPCOMM_HOSTID"] = rank < 2 ? "hostA" : "hostB";
    e["TPCOMM_SOCKET_ADDR"] = rank < 2 ? "127.0.0.2" : "127.0.0.3";
    return e;
  };
  auto r = run_ranks(
      4,
      [&](RankContext& c) {
        std::string log = log_to_rank_file(c);
        auto pg = make_world(c, "auto");
        int me = c.rank;
        // Everyone exchanges with everyone, small and large.
        for (size_t bytes : {size_t(64), size_t(1 << 20)}) {
          std::vector<std::vector<uint8_t>> out(4, std::vector<uint8_t>(bytes)),
              in(4, std::vector<uint8_t>(bytes));
          std::vector<std::shared_ptr<Work>> works;
          for (int p = 0; p < 4; ++p) {
            if (p == me) continue;
            fill_pattern(out[p], DType::UInt8, me * 4 + p);
            works.push_back(pg->irecv(Tensor::of(in[p]), p));
            works.push_back(pg->isend(Tensor::of(out[p]), p));
          }
          for (auto& w : works) w->wait();
          for (int p = 0; p < 4; ++p) {
            if (p != me) {
              ASSERT_EQ(check_pattern(in[p], DType::UInt8, p * 4 + me), -1);
            }
          }
        }
        std::string text = read_file(log);
        for (int p = 0; p < 4; ++p) {
          if (p == me) continue;
          bool same = (p < 2) == (me < 2);
          std::string want = "rank " + std::to_string(me) + " -> rank " + std::to_string(p) + ": " +
                             (same ? "shm" : "tcp");
          EXPECT_NE(text.find(want), std::string::npos) << "missing '" << want << "' in\n" << text;
        }
        std::string mine = me < 2 ? "127.0.0.2" : "127.0.0.3";
        EXPECT_NE(text.find("tcp listening on " + mine), std::string::npos) << text;
        pg->destroy();
      },
      opt);
  EXPECT_RANKS_OK(r);
}

// TPCOMM_TRANSPORT=tcp forces tcp even between ranks of one host.
TEST(TwoHosts, TransportCanBeForced) {
  if (!transport::has_transport("tcp")) GTEST_SKIP() << "no tcp transport";
  RunOptions opt;
  opt.env = {{"TPCOMM_DEBUG", "info"}, {"TPCOMM_DEBUG_SUBSYS", "p2p"}, {"TPCOMM_TRANSPORT", "tcp"}};
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        std::string text = exchange_logging_links(c);
        std::string want =
            "rank " + std::to_string(c.rank) + " -> rank " + std::to_string(1 - c.rank) + ": tcp";
        EXPECT_NE(text.find(want), std::string::npos) << text;
      },
      opt);
  EXPECT_RANKS_OK(r);
}

// init_process_group through an init_method URL (the rendezvous layer) rather than a store.
TEST(TwoHosts, InitThroughFileUrl) {
  auto r = run_ranks(3, [&](RankContext& c) {
    InitOptions o;
    o.init_method = "file://" + c.dir + "/rdzv";
    o.rank = c.rank;
    o.world_size = 3;
    o.timeout = std::chrono::seconds(60);
    init_process_group(o);
    EXPECT_EQ(get_world_size(), 3);
    int32_t x = c.rank, y = -1;
    auto rw = irecv(Tensor::of(&y, 1), (c.rank + 2) % 3);
    send(Tensor::of(&x, 1), (c.rank + 1) % 3);
    rw->wait();
    EXPECT_EQ(y, (c.rank + 2) % 3);
    destroy_process_group();
  });
  EXPECT_RANKS_OK(r);
}

TEST(TwoHosts, Ipv6Loopback) {
  if (!transport::has_transport("tcp")) GTEST_SKIP() << "no tcp transport";
  try {
    net::Fd probe = net::listen_on("::1", 0, 1, false);
  } catch (const std::exception& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  RunOptions opt;
  opt.env = {{"TPCOMM_SOCKET_ADDR", "::1"}};
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "tcp");
        std::vector<uint8_t> out(300000), in(300000);
        fill_pattern(out, DType::UInt8, c.rank);
        auto rw = pg->irecv(Tensor::of(in), 1 - c.rank);
        pg->send(Tensor::of(out), 1 - c.rank);
        rw->wait();
        EXPECT_EQ(check_pattern(in, DType::UInt8, 1 - c.rank), -1);
        pg->destroy();
      },
      opt);
  EXPECT_RANKS_OK(r);
}

}  // namespace
}  // namespace tpcomm::testing
