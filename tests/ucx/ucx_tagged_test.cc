// The rendezvous path for transports that match large messages themselves
// (Capabilities::tagged_data): over UCX the sender posts its RTS and the data at once, the RTS
// inside UCX's own rendezvous RTS (an active message; the receiver takes the data with
// ucp_am_recv_data_nbx when the RTS matches), or, with TPCOMM_UCX_TAGGED=tag, as a message
// before the data as a tagged message (ucp_tag_recv_nbx). Over UCX's tcp and its shared
// memory, in both forms: sizes around the eager/rendezvous
// threshold byte for byte in both orders (receive posted first, message first), any-source,
// out-of-order tags, refusals (too small, other dtype) failing both sides and leaving the
// channel usable, a refusal queued behind back-pressure failing the sender, timeouts that later
// complete, a killed peer with data in flight, and thousands of transfers in flight.
#include <signal.h>

#include <set>
#include <thread>

#include "ucx/ucx_test_util.h"

namespace tpcomm::testing {
namespace {

class UcxTagged : public UcxLaneTest {
 protected:
  RunOptions opts() const {
    RunOptions o = UcxLaneTest::opts();
    // Every rendezvous size takes the tagged path (the default sends above 1 MiB by CTS).
    o.env["TPCOMM_UCX_TAGGED_MAX"] = "1G";
    return o;
  }
};

// The ucx transport's eager limit is 64 KiB (TPCOMM_UCX_RNDV_THRESHOLD): 65536 goes eager,
// 65537 takes the tagged path.
const std::vector<size_t> kSizes = {0,      1,       65536 - 1,     65536,  65536 + 1,
                                    300001, 1 << 20, (1 << 20) + 3, 4 << 20};

// Rank 0 sends every size to rank 1, once with the receive posted first and once with the
// message first (the receiver posts only after the sender says it has sent); both check
// every byte.
TEST_P(UcxTagged, SizesAroundTheThresholdInBothOrders) {
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "ucx");
        int seed = 0;
        for (bool unexpected : {false, true}) {
          for (size_t bytes : kSizes) {
            std::string key = "sent" + std::to_string(seed);
            if (c.rank == 0) {
              std::vector<uint8_t> out(bytes);
              fill_pattern(out, DType::UInt8, seed);
              if (!unexpected) c.store->wait({"posted" + std::to_string(seed)});
              auto w = pg->isend(Tensor::of(out), 1, seed);
              c.store->set(key, "1");
              w->wait();
            } else {
              std::vector<uint8_t> in(bytes, 0xEE);
              std::shared_ptr<Work> w;
              if (unexpected) {
                c.store->wait({key});
                // Let the RTS (and whatever UCX sends eagerly) arrive first.
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
              }
              w = pg->irecv(Tensor::of(in), 0, seed);
              if (!unexpected) c.store->set("posted" + std::to_string(seed), "1");
              w->wait();
              EXPECT_EQ(check_pattern(in, DType::UInt8, seed), -1)
                  << bytes << " bytes, " << (unexpected ? "message first" : "receive first");
            }
            ++seed;
          }
        }
        pg->destroy();
      },
      opts());
  EXPECT_RANKS_OK(r);
}

// Rank 0 receives rendezvous-sized messages from any source, some posted before the
// messages came and some after.
TEST_P(UcxTagged, AnySource) {
  auto r = run_ranks(
      3,
      [&](RankContext& c) {
        auto pg = make_world(c, "ucx");
        constexpr size_t kN = 100003;
        if (c.rank == 0) {
          std::set<int> seen;
          for (int round = 0; round < 2; ++round) {
            if (round == 1) c.store->wait({"sent1", "sent2"});
            for (int i = 0; i < 2; ++i) {
              std::vector<int32_t> in(kN, -1);
              auto w = pg->irecv(Tensor::of(in), kAnySource, 5 + round);
              w->wait();
              int src = w->source_rank();
              seen.insert(src);
              for (size_t k = 0; k < kN; k += 9973)
                ASSERT_EQ(in[k], static_cast<int32_t>(k) * 3 + src * 1000 + round) << k;
              ASSERT_EQ(in[kN - 1], static_cast<int32_t>(kN - 1) * 3 + src * 1000 + round);
            }
          }
          EXPECT_EQ(seen, (std::set<int>{1, 2}));
        } else {
          for (int round = 0; round < 2; ++round) {
            std::vector<int32_t> out(kN);
            for (size_t k = 0; k < kN; ++k)
              out[k] = static_cast<int32_t>(k) * 3 + c.rank * 1000 + round;
            auto w = pg->isend(Tensor::of(out), 0, 5 + round);
            if (round == 1) c.store->set("sent" + std::to_string(c.rank), "1");
            w->wait();
          }
        }
        pg->destroy();
      },
      opts());
  EXPECT_RANKS_OK(r);
}

// Messages on two tags, received in the other tag's order and, within a tag, in order.
TEST_P(UcxTagged, OutOfOrderTags) {
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "ucx");
        constexpr int kPer = 4;
        constexpr size_t kN = 40000;
        if (c.rank == 0) {
          std::vector<std::vector<int32_t>> out(2 * kPer, std::vector<int32_t>(kN));
          std::vector<std::shared_ptr<Work>> ws;
          for (int i = 0; i < 2 * kPer; ++i) {
            std::fill(out[static_cast<size_t>(i)].begin(), out[static_cast<size_t>(i)].end(), i);
            ws.push_back(pg->isend(Tensor::of(out[static_cast<size_t>(i)]), 1, i % 2));
          }
          for (auto& w : ws) w->wait();
        } else {
          std::vector<std::vector<int32_t>> in(2 * kPer, std::vector<int32_t>(kN, -1));
          std::vector<std::shared_ptr<Work>> ws;
          for (int tag : {1, 0})
            for (int k = 0; k < kPer; ++k)
              ws.push_back(pg->irecv(Tensor::of(in[static_cast<size_t>(tag * kPer + k)]), 0, tag));
          for (auto& w : ws) w->wait();
          for (int tag : {0, 1})
            for (int k = 0; k < kPer; ++k) {
              auto& v = in[static_cast<size_t>(tag * kPer + k)];
              ASSERT_EQ(v.front(), 2 * k + tag);
              ASSERT_EQ(v.back(), 2 * k + tag);
            }
        }
        pg->destroy();
      },
      opts());
  EXPECT_RANKS_OK(r);
}

// A receive buffer smaller than the message, or of another dtype, fails both sides with the
// reason (receive posted first and message first); the refused data is dropped, and the next
// message on the same tag arrives intact.
TEST_P(UcxTagged, RefusalsFailBothSidesAndTheChannelGoesOn) {
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "ucx");
        constexpr size_t kN = 300000;  // bytes, float32: 75000 elements
        int step = 0;
        for (bool unexpected : {false, true}) {
          for (bool dtype : {false, true}) {
            std::string sent = "sent" + std::to_string(step);
            std::string posted = "posted" + std::to_string(step);
            if (c.rank == 0) {
              std::vector<uint8_t> out(kN);
              fill_pattern(out, DType::Float32, step);
              if (!unexpected) c.store->wait({posted});
              auto w = pg->isend(as_tensor(out, DType::Float32), 1, 3);
              c.store->set(sent, "1");
              if (dtype) {
                std::string e = error_of<MismatchError>([&] { w->wait(); });
                EXPECT_TRUE(contains(e, "rank 1 refused the message")) << e;
              } else {
                std::string e = error_of<InvalidArgument>([&] { w->wait(); });
                EXPECT_TRUE(contains(e, "rank 1 refused the message")) << e;
                EXPECT_TRUE(contains(e, "100000-byte receive buffer")) << e;
              }
              // The channel goes on: the next message on the tag is intact.
              pg->send(as_tensor(out, DType::Float32), 1, 3);
            } else {
              std::vector<uint8_t> small(dtype ? kN : 100000, 0xEE);
              if (unexpected) {
                c.store->wait({sent});
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
              }
              auto w = pg->irecv(as_tensor(small, dtype ? DType::Int32 : DType::Float32), 0, 3);
              if (!unexpected) c.store->set(posted, "1");
              if (dtype) {
                std::string e = error_of<MismatchError>([&] { w->wait(); });
                EXPECT_TRUE(contains(e, "the dtypes differ")) << e;
              } else {
                std::string e = error_of<InvalidArgument>([&] { w->wait(); });
                EXPECT_TRUE(contains(e, "more than the 100000-byte receive buffer holds")) << e;
              }
              std::vector<uint8_t> in(kN, 0xEE);
              pg->recv(as_tensor(in, DType::Float32), 0, 3);
              EXPECT_EQ(check_pattern(in, DType::Float32, step), -1) << step;
            }
            ++step;
          }
        }
        pg->destroy();
      },
      opts());
  EXPECT_RANKS_OK(r);
}

// 299e518: a refused tagged send whose refusal CTS has to wait in the receiver's queue still
// fails on the sender, never succeeds. Rank 1 first blocks its link to rank 0: rendezvous
// sends that rank 0 takes only later, with TPCOMM_UCX_MAX_REQUESTS so low that the later ones
// are refused by the transport and queue up. Its refusal of rank 0's message then queues
// behind them, and the drop of the data behind the refusal: rank 0's send stays pending (the
// drop would otherwise complete it as a success before the refusal arrives) and fails with
// the reason once rank 0 takes rank 1's messages and the queue drains.
TEST_P(UcxTagged, RefusalQueuedBehindBackPressureFailsTheSender) {
  RunOptions o = opts();
  o.env["TPCOMM_UCX_RECV_DEPTH"] = "16";
  o.env["TPCOMM_UCX_MAX_REQUESTS"] = "24";  // the 16 pool receives and 8 more
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "ucx");
        constexpr size_t kBig = 300000;  // rendezvous: the tagged path
        constexpr int kBlocking = 12;    // more than the 8 requests left: some queue
        if (c.rank == 1) {
          std::vector<std::vector<uint8_t>> out(kBlocking, std::vector<uint8_t>(kBig));
          std::vector<std::shared_ptr<Work>> ws;
          for (int i = 0; i < kBlocking; ++i) {
            fill_pattern(out[static_cast<size_t>(i)], DType::UInt8, 100 + i);
            ws.push_back(pg->isend(Tensor::of(out[static_cast<size_t>(i)]), 0, 5));
          }
          c.store->set("blocked", "1");
          c.store->wait({"sent"});
          std::vector<uint8_t> small(1000, 0xEE);
          auto w = pg->irecv(Tensor::of(small), 0, 3);
          std::string e = error_of<InvalidArgument>([&] { w->wait(); });
          EXPECT_TRUE(contains(e, "more than the 1000-byte receive buffer holds")) << e;
          c.store->set("refused", "1");
          for (auto& sw : ws) sw->wait();
        } else {
          c.store->wait({"blocked"});
          std::vector<uint8_t> big(kBig);
          fill_pattern(big, DType::UInt8, 3);
          auto w = pg->isend(Tensor::of(big), 1, 3);
          c.store->set("sent", "1");
          c.store->wait({"refused"});
          // Rank 1 has refused, its CTS is queued: nothing may complete this send yet (a
          // dropped-data completion would show within these 100 ms).
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          EXPECT_FALSE(w->is_completed()) << "the refused send completed before its refusal";
          for (int i = 0; i < kBlocking; ++i) {
            std::vector<uint8_t> in(kBig, 0xEE);
            pg->recv(Tensor::of(in), 1, 5);
            EXPECT_EQ(check_pattern(in, DType::UInt8, 100 + i), -1) << i;
          }
          std::string e = error_of<InvalidArgument>([&] { w->wait(); });
          EXPECT_TRUE(contains(e, "rank 1 refused the message")) << e;
          EXPECT_TRUE(contains(e, "1000-byte receive buffer")) << e;
        }
        pg->destroy();
      },
      o);
  EXPECT_RANKS_OK(r);
}

// A send whose receive is not posted yet, and a receive whose message is not sent yet, time
// out with a TimeoutError and still complete afterwards.
TEST_P(UcxTagged, TimeoutsThenCompletion) {
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "ucx");
        constexpr size_t kN = 1 << 20;
        std::vector<uint8_t> buf(kN);
        if (c.rank == 0) {
          fill_pattern(buf, DType::UInt8, 7);
          auto w = pg->isend(Tensor::of(buf), 1, 1);
          error_of<TimeoutError>([&] { w->wait(std::chrono::milliseconds(200)); });
          c.store->set("timed_out", "1");
          w->wait();
          c.store->wait({"recv_timed_out"});
          pg->send(Tensor::of(buf), 1, 2);
        } else {
          auto w = pg->irecv(Tensor::of(buf), 0, 2);
          error_of<TimeoutError>([&] { w->wait(std::chrono::milliseconds(200)); });
          c.store->set("recv_timed_out", "1");
          c.store->wait({"timed_out"});
          std::vector<uint8_t> first(kN);
          pg->recv(Tensor::of(first), 0, 1);
          EXPECT_EQ(check_pattern(first, DType::UInt8, 7), -1);
          w->wait();
          EXPECT_EQ(check_pattern(buf, DType::UInt8, 7), -1);
        }
        pg->destroy();
      },
      opts());
  EXPECT_RANKS_OK(r);
}

// Rank 1 sends 4 MiB to rank 0 (which has not posted its receive) and rank 0 sends 4 MiB to
// rank 1 (which never receives it); then rank 1 is killed. Rank 0's send and its receive,
// posted after the kill, fail naming rank 1, well before the timeout.
TEST_P(UcxTagged, KilledPeerWithDataInFlight) {
  RunOptions o = opts();
  o.may_die = {1};
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "ucx");
        std::vector<uint8_t> out(4 << 20, 1), in(4 << 20);
        auto sw = pg->isend(Tensor::of(out), 1 - c.rank, 9);
        c.store->set("sent" + std::to_string(c.rank), "1");
        if (c.rank == 1) {
          c.store->wait({"go"});
          raise(SIGKILL);
        }
        c.store->wait({"sent1"});
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 1's RTS arrives
        c.store->set("go", "1");
        auto t0 = std::chrono::steady_clock::now();
        std::string e1 = error_of<PeerError>([&] { sw->wait(std::chrono::seconds(30)); });
        EXPECT_TRUE(contains(e1, "rank 1")) << e1;
        std::string e2 = error_of<PeerError>([&] {
          auto rw = pg->irecv(Tensor::of(in), 1, 9);
          rw->wait(std::chrono::seconds(30));
        });
        EXPECT_TRUE(contains(e2, "rank 1")) << e2;
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(25)) << e1 << e2;
        pg->destroy();
      },
      o);
  EXPECT_RANKS_OK(r);
}

// 1000 rendezvous-sized transfers in flight each way at once, half of the receives posted
// before the messages and half after.
TEST_P(UcxTagged, ThousandsInFlight) {
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "ucx");
        int peer = 1 - c.rank;
        constexpr int kMsgs = 1000;
        constexpr size_t kN = 16400;  // int32: 65600 bytes, just above the threshold
        std::vector<std::vector<int32_t>> out(kMsgs, std::vector<int32_t>(kN)),
            in(kMsgs, std::vector<int32_t>(kN, -1));
        std::vector<std::shared_ptr<Work>> ws;
        for (int i = 0; i < kMsgs / 2; ++i)
          ws.push_back(pg->irecv(Tensor::of(in[static_cast<size_t>(i)]), peer, 4));
        for (int i = 0; i < kMsgs; ++i) {
          auto& v = out[static_cast<size_t>(i)];
          for (size_t k = 0; k < kN; k += 1000) v[k] = i * 7 + c.rank;
          v[kN - 1] = i * 7 + c.rank;
          ws.push_back(pg->isend(Tensor::of(v), peer, 4));
        }
        for (int i = kMsgs / 2; i < kMsgs; ++i)
          ws.push_back(pg->irecv(Tensor::of(in[static_cast<size_t>(i)]), peer, 4));
        for (auto& w : ws) w->wait();
        for (int i = 0; i < kMsgs; ++i) {
          auto& v = in[static_cast<size_t>(i)];
          for (size_t k = 0; k < kN; k += 1000) ASSERT_EQ(v[k], i * 7 + peer) << i;
          ASSERT_EQ(v[kN - 1], i * 7 + peer) << i;
        }
        pg->destroy();
      },
      opts());
  EXPECT_RANKS_OK(r);
}

// The form each endpoint sends is the one asked for (the log line of every endpoint says which),
// and ranks whose settings differ still exchange rendezvous messages both ways: one rank sends
// the lane's form, the other the other form or none (TPCOMM_UCX_TAGGED=off, which also takes
// the active-message form).
TEST_P(UcxTagged, TheFormAskedForAndMixedSettings) {
  const std::string mine = GetParam().tagged.empty() ? "auto" : GetParam().tagged;
  for (const std::string other : {mine == "auto" ? "tag" : "auto", "off"}) {
    RunOptions o = opts();
    o.env["TPCOMM_DEBUG"] = "info";
    o.env["TPCOMM_DEBUG_SUBSYS"] = "ucx";
    auto r = run_ranks(
        2,
        [&](RankContext& c) {
          std::string log = log_to_rank_file(c);
          if (c.rank == 1) {
            setenv("TPCOMM_UCX_TAGGED", other.c_str(), 1);
            config::reload();
          }
          auto pg = make_world(c, "ucx");
          constexpr size_t kN = 200001;
          for (int round = 0; round < 2; ++round) {
            std::vector<uint8_t> buf(kN);
            if ((c.rank == 0) == (round == 0)) {
              fill_pattern(buf, DType::UInt8, round);
              pg->send(Tensor::of(buf), 1 - c.rank, round);
            } else {
              pg->recv(Tensor::of(buf), 1 - c.rank, round);
              EXPECT_EQ(check_pattern(buf, DType::UInt8, round), -1) << "round " << round;
            }
          }
          pg->destroy();
          std::string text = read_file(log);
          // What this rank sends: the active message only where the peer takes it (tagged
          // data on there).
          std::string form = c.rank == 0 ? mine : other;
          if (form == "auto" && c.rank == 0 && other == "off") form = "tag";
          if (form == "auto") {
            EXPECT_TRUE(contains(text, "tagged data with its RTS in one active message")) << text;
          } else if (form == "tag") {
            EXPECT_TRUE(contains(text, "tagged data after its RTS (two messages)")) << text;
          } else {
            EXPECT_FALSE(contains(text, "tagged data")) << text;
          }
        },
        o);
    EXPECT_RANKS_OK(r) << "rank 1 with TPCOMM_UCX_TAGGED=" << other;
  }
}

INSTANTIATE_TEST_SUITE_P(Ucx, UcxTagged, kUcxLanes, lane_name);
// The same with the RTS as a message of its own before its data (TPCOMM_UCX_TAGGED=tag; the
// default carries it inside UCX's rendezvous RTS).
INSTANTIATE_TEST_SUITE_P(UcxTwoMessages, UcxTagged,
                         ::testing::Values(Lane{"tcp", "tcp", "tag"},
                                           Lane{"shm", "shm,self", "tag"}),
                         lane_name);

}  // namespace
}  // namespace tpcomm::testing
