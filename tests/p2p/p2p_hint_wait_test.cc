// The spinning wait's hint mode (src/p2p/progress.cc): a wait that spins long watches its
// transports' lock-free maybe_pending() hints instead of taking the engine lock. With a long
// spin phase (TPCOMM_WAIT_SPIN_US) every wait here runs in that mode: late messages, a
// ping-pong, any-source receives, a second thread posting while another spins, and the
// group destroyed under a spinning waiter (shutdown must wait for it to stop calling the
// transports before closing them) all behave as without it. And the oversubscribed wait: a
// 2 us spin when LOCAL_WORLD_SIZE exceeds the cores, with the clock read every round.
#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "core/oversubscribe.h"
#include "p2p/p2p_test_util.h"

namespace tpcomm::testing {
namespace {

RunOptions long_spin() {
  RunOptions o;
  o.env["TPCOMM_WAIT_SPIN_US"] = "3000000";  // 3 s: the waits below spin, never sleep
  return o;
}

TEST(HintWait, LateMessagesPingPongAndAnySource) {
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "shm");
        int peer = 1 - c.rank;
        // A late message: the receiver spins well past its first 16 rounds.
        int64_t v = -1, w = 40 + c.rank;
        if (c.rank == 0) {
          pg->recv(Tensor::of(&v, 1), peer);
          EXPECT_EQ(v, 41);
          pg->send(Tensor::of(&w, 1), peer);
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(30));
          pg->send(Tensor::of(&w, 1), peer);
          pg->recv(Tensor::of(&v, 1), peer);
          EXPECT_EQ(v, 40);
        }
        // A ping-pong with pauses on one side, so that the other's waits are long.
        for (int i = 0; i < 200; ++i) {
          int32_t out = i * 5 + c.rank, in = -1;
          if (c.rank == 0) {
            pg->send(Tensor::of(&out, 1), peer);
            pg->recv(Tensor::of(&in, 1), peer);
          } else {
            if (i % 20 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
            pg->recv(Tensor::of(&in, 1), peer);
            pg->send(Tensor::of(&out, 1), peer);
          }
          ASSERT_EQ(in, i * 5 + peer);
        }
        // Any source, late.
        int32_t x = 77, y = -1;
        if (c.rank == 0) {
          auto rw = pg->recv(Tensor::of(&y, 1), kAnySource);
          EXPECT_EQ(y, 77);
          EXPECT_EQ(rw->source_rank(), 1);
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          pg->send(Tensor::of(&x, 1), 0);
        }
        pg->destroy();
      },
      long_spin());
  EXPECT_TRUE(ranks_ok(r));
}

// One thread spins on a receive while another thread of the same rank posts sends and
// receives of its own: the spinning thread does not hold the engine lock, and its periodic
// locked rounds progress what the other thread queued.
TEST(HintWait, AnotherThreadPostsWhileOneSpins) {
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "shm");
        int peer = 1 - c.rank;
        int64_t late = -1, signal = 5;
        std::thread spinner;
        if (c.rank == 0) {
          spinner = std::thread([&] { pg->recv(Tensor::of(&late, 1), peer, 9); });
        }
        for (int i = 0; i < 100; ++i) {
          int32_t out = i + 1000 * c.rank, in = -1;
          auto rw = pg->irecv(Tensor::of(&in, 1), peer, 1);
          pg->isend(Tensor::of(&out, 1), peer, 1)->wait();
          rw->wait();
          ASSERT_EQ(in, i + 1000 * peer);
        }
        if (c.rank == 1) pg->send(Tensor::of(&signal, 1), peer, 9);
        if (spinner.joinable()) spinner.join();
        if (c.rank == 0) {
          EXPECT_EQ(late, 5);
        }
        pg->destroy();
      },
      long_spin());
  EXPECT_TRUE(ranks_ok(r));
}

// After a long spinning wait (the progress thread's park has stretched to its cap), a large
// isend left to overlap "compute" (no call into the library) is still carried out by the
// progress thread: the rendezvous answer and the data move while rank 0 only sleeps, and
// rank 1 receives it before rank 0 looks again.
TEST(HintWait, IsendAfterALongSpinProgressesInTheBackground) {
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "shm");
        int peer = 1 - c.rank;
        constexpr size_t kLen = 4 << 20;  // rendezvous: needs the sender's progress
        std::vector<uint8_t> buf(kLen, static_cast<uint8_t>(c.rank == 0 ? 0x5A : 0));
        int64_t v = -1, w = 7;
        if (c.rank == 0) {
          pg->recv(Tensor::of(&v, 1), peer);  // spins ~100 ms
          EXPECT_EQ(v, 7);
          auto sw =
              pg->isend(Tensor::raw(buf.data(), static_cast<int64_t>(kLen), DType::UInt8), peer, 3);
          // "Compute": only the progress thread can answer the receiver now.
          auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
          while (!c.store->check({"hint-wait/got"}) && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          EXPECT_TRUE(c.store->check({"hint-wait/got"}))
              << "rank 1 did not receive the isend while rank 0 computed";
          sw->wait();
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          pg->send(Tensor::of(&w, 1), peer);
          pg->recv(Tensor::raw(buf.data(), static_cast<int64_t>(kLen), DType::UInt8), peer, 3);
          EXPECT_EQ(buf.front(), 0x5A);
          EXPECT_EQ(buf.back(), 0x5A);
          c.store->set("hint-wait/got", std::vector<uint8_t>{1});
        }
        pg->destroy();
      },
      long_spin());
  EXPECT_TRUE(ranks_ok(r));
}

// The group is destroyed while a thread spins in hint mode on a receive that never comes:
// the wait ends with AbortedError, and nothing touches the closed transports.
TEST(HintWait, DestroyWhileAThreadSpins) {
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, "shm");
        int peer = 1 - c.rank;
        int32_t a = 1, b = -1;
        auto rw = pg->irecv(Tensor::of(&b, 1), peer);
        pg->send(Tensor::of(&a, 1), peer);
        rw->wait();  // both linked
        for (int round = 0; round < 3; ++round) {
          std::atomic<int> outcome{0};  // 1: aborted, 2: other error, 3: returned
          std::string what;             // the error's text (read after the join)
          int32_t never = -1;
          auto w = pg->irecv(Tensor::of(&never, 1), peer, 100 + round);
          std::thread waiter([&] {
            try {
              w->wait();
              outcome = 3;
            } catch (const AbortedError&) {
              outcome = 1;
            } catch (const std::exception& e) {
              what = e.what();
              outcome = 2;
            }
          });
          std::this_thread::sleep_for(std::chrono::milliseconds(20 + 10 * round));
          if (round < 2) {
            // Not destroyed yet: the peer answers, and the spinning wait sees it.
            int32_t ans = round;
            pg->send(Tensor::of(&ans, 1), peer, 100 + round);
            waiter.join();
            EXPECT_EQ(outcome.load(), 3);
            EXPECT_EQ(never, round);
          } else if (c.rank == 0) {
            pg->destroy();
            waiter.join();
            EXPECT_EQ(outcome.load(), 1)
                << "the spinning wait did not end with AbortedError: " << what;
            c.store->set("destroyed0", {1});
          } else {
            // Rank 0 going away may fail this wait first (PeerError); either way it ends.
            c.store->wait({"destroyed0"}, std::chrono::seconds(60));
            pg->destroy();
            waiter.join();
            EXPECT_TRUE(outcome.load() == 1 || outcome.load() == 2)
                << outcome.load() << " " << what;
          }
        }
      },
      long_spin());
  EXPECT_TRUE(ranks_ok(r));
}

// Oversubscribed hosts (LOCAL_WORLD_SIZE above the cores) spin 2 us unless the user chose.
TEST(OversubscribedWait, SpinIsCutOnlyWhenRanksOutnumberCoresAndTheUserDidNotChoose) {
  EXPECT_EQ(wait_spin_us(100, false, 8, 2), 2);
  EXPECT_EQ(wait_spin_us(100, false, 2, 2), 100);   // one rank per core
  EXPECT_EQ(wait_spin_us(100, false, 0, 2), 100);   // no launcher told us
  EXPECT_EQ(wait_spin_us(100, true, 8, 2), 100);    // TPCOMM_WAIT_SPIN_US set
  EXPECT_EQ(wait_spin_us(1, false, 8, 2), 1);       // never raised
  EXPECT_EQ(wait_spin_us(100, false, 8, -1), 100);  // unknown core count
}

// The short-spin path (clock read every round, yielding after 2 us) over tcp: late messages,
// a ping-pong and collectives complete, with the right values.
TEST(OversubscribedWait, TcpPingPongAndCollectivesWithTheShortSpin) {
  RunOptions o;
  o.env["LOCAL_WORLD_SIZE"] = "4096";  // more ranks than any test machine's cores
  auto r = run_ranks(
      3,
      [&](RankContext& c) {
        auto pg = make_world(c, "tcp");
        const int next = (c.rank + 1) % 3, prev = (c.rank + 2) % 3;
        for (int32_t i = 0; i < 200; ++i) {
          int32_t out = i * 10 + c.rank, in = -1;
          if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
          auto s = pg->isend(Tensor::of(&out, 1), next);
          pg->recv(Tensor::of(&in, 1), prev);
          s->wait();
          ASSERT_EQ(in, i * 10 + prev);
        }
        std::vector<float> v(1000, static_cast<float>(c.rank + 1));
        for (int k = 0; k < 20; ++k) {
          std::fill(v.begin(), v.end(), static_cast<float>(c.rank + 1));
          pg->all_reduce(Tensor::of(v.data(), v.size()));
          ASSERT_EQ(v[0], 6.0f);
          ASSERT_EQ(v[999], 6.0f);
        }
        pg->destroy();
      },
      o);
  EXPECT_TRUE(ranks_ok(r));
}

}  // namespace
}  // namespace tpcomm::testing
