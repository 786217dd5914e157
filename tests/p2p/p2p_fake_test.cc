// Tier (c): the protocol over the in-process "fake" transport, which has pre-posted receive
// slots (so credit-based flow control runs), can reorder deliveries and can break links.
#include <gtest/gtest.h>

#include <thread>

#include "p2p/fake_transport.h"
#include "p2p/p2p_test_util.h"
#include "p2p/wire.h"
#include "pg/group_state.h"

namespace tpcomm::testing {
namespace {

void run_threads(int n, const std::function<void(int, ProcessGroup&)>& body) {
  auto store = std::make_shared<HashStore>();
  store->set_timeout(std::chrono::seconds(60));
  std::vector<std::thread> threads;
  std::vector<std::string> errors(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        InitOptions o;
        o.backend = "fake";
        o.timeout = std::chrono::seconds(60);
        auto pg = ProcessGroup::create(store, r, n, o);
        body(r, *pg);
        pg->destroy();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Everyone floods everyone with eager and rendezvous messages while receivers post late:
// data arrives intact, in per-tag order, and no sender ever exceeds its credits.
void flood(bool reorder) {
  FakeOptions fo;
  fo.recv_slots = 4;
  fo.max_message = 1024;
  fo.max_put = 3000;  // rendezvous data in several puts
  fo.reorder = reorder;
  register_fake_transport(fo);
  fake_credit_violations() = 0;
  fake_max_slots_used() = 0;
  run_threads(3, [](int me, ProcessGroup& pg) {
    const int n = 3, count = 200;
    std::vector<std::vector<int32_t>> out, in;
    std::vector<std::shared_ptr<Work>> works;
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      for (int i = 0; i < count; ++i) {
        size_t len = (i % 5 == 0) ? 5000 : static_cast<size_t>(1 + i % 50);  // some > eager
        out.emplace_back(len, me * 100000 + i);
        works.push_back(pg.isend(Tensor::of(out.back()), p, i % 3));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // receivers post late
    in.reserve((n - 1) * count);
    std::vector<std::pair<int, int>> expect;
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      for (int i = 0; i < count; ++i) {
        size_t len = (i % 5 == 0) ? 5000 : static_cast<size_t>(1 + i % 50);
        in.emplace_back(len, -1);
        works.push_back(pg.irecv(Tensor::of(in.back()), p, i % 3));
        expect.emplace_back(p, i);
      }
    }
    for (auto& w : works) w->wait();
    for (size_t k = 0; k < in.size(); ++k) {
      auto [p, i] = expect[k];
      ASSERT_EQ(in[k].front(), p * 100000 + i) << "message " << i << " from " << p;
      ASSERT_EQ(in[k].back(), p * 100000 + i);
    }
  });
  EXPECT_EQ(fake_credit_violations().load(), 0u) << "a sender exceeded the receive slots";
  EXPECT_GT(fake_max_slots_used().load(), 0u);
  EXPECT_LE(fake_max_slots_used().load(), fo.recv_slots);
}

// A rendezvous send the transport cannot register fails at once, and takes no sequence
// number: the messages after it on the same group, peer and tag still arrive (a gap in the
// numbers would leave the receiver waiting for the refused one forever).
TEST(P2PFake, RefusedRegistrationLeavesNoSequenceGap) {
  FakeOptions fo;
  fo.max_message = 1024;
  fo.refuse_register_bytes = 4 * 3000;
  register_fake_transport(fo);
  run_threads(2, [](int me, ProcessGroup& pg) {
    std::vector<int32_t> refused(3000, 7), big(2000, 8), small(3, 9);
    if (me == 0) {
      EXPECT_THROW(pg.isend(Tensor::of(refused), 1, 5), TransportError);
      pg.send(Tensor::of(big), 1, 5);
      pg.send(Tensor::of(small), 1, 5);
    } else {
      std::vector<int32_t> a(2000, -1), b(3, -1);
      auto wa = pg.irecv(Tensor::of(a), 0, 5);
      auto wb = pg.irecv(Tensor::of(b), 0, 5);
      EXPECT_TRUE(wa->wait(std::chrono::seconds(30)));
      EXPECT_TRUE(wb->wait(std::chrono::seconds(30)));
      EXPECT_EQ(a.front(), 8);
      EXPECT_EQ(a.back(), 8);
      EXPECT_EQ(b.back(), 9);
    }
  });
}

// Tagged data (an RtsData) over a transport that cannot receive it, which only a peer of
// another build or a corrupt stream sends: the receive it matches fails naming the sender, and
// the receiver's progress goes on (the transport's NotSupportedError does not escape it).
TEST(P2PFake, TaggedDataOverATransportWithoutItFailsThePeer) {
  register_fake_transport(FakeOptions{});
  run_threads(2, [](int me, ProcessGroup& pg) {
    std::vector<int32_t> buf(2000, -1);
    std::shared_ptr<Work> w;
    if (me == 1) w = pg.irecv(Tensor::of(buf), 0, 77);
    pg.barrier();  // linked both ways, and the receive is posted
    if (me == 0) {
      p2p::Header h;
      h.dtype = DType::Int32;
      h.group = pg.state().info.id;
      h.src = 0;
      h.tag = 77;
      h.seq = 0;
      h.bytes = buf.size() * sizeof(int32_t);
      p2p::Rts r;
      r.send_id = 1;
      r.data_id = 1;
      std::vector<uint8_t> msg(p2p::kRtsDataSize);
      msg.resize(p2p::encode_rts_data(h, r, msg.data()));
      fake_inject(0, 1, msg);
      return;
    }
    try {
      w->wait(std::chrono::seconds(30));
      ADD_FAILURE() << "the receive completed";
    } catch (const PeerError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
      EXPECT_NE(what.find("cannot take"), std::string::npos) << what;
    }
  });
}

TEST(P2PFake, CreditsAreNeverExceeded) { flood(false); }

TEST(P2PFake, OutOfOrderDeliveryStillMatchesInSequence) { flood(true); }

TEST(P2PFake, BrokenLinkFailsPendingWorkAndKeepsOthers) {
  FakeOptions fo;
  register_fake_transport(fo);
  std::atomic<int> posted{0};
  std::atomic<bool> broken{false};
  run_threads(3, [&](int me, ProcessGroup& pg) {
    if (me == 0) {
      std::vector<int32_t> buf(10);
      auto w = pg.irecv(Tensor::of(buf), 1, 5);
      ++posted;
      while (posted < 3) std::this_thread::yield();
      fake_break_link(0, 1);
      broken = true;
      std::string err = error_of<PeerError>([&] { w->wait(std::chrono::seconds(20)); });
      EXPECT_EQ(err.find("wrong exception"), std::string::npos) << err;
      EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
      // Rank 2 is unaffected.
      int32_t x = 0;
      pg.recv(Tensor::of(&x, 1), 2, 6);
      EXPECT_EQ(x, 42);
    } else {
      ++posted;
      while (!broken) std::this_thread::yield();  // rank 1 must be alive when its link breaks
      if (me == 2) {
        while (posted < 3) std::this_thread::yield();
        int32_t x = 42;
        pg.send(Tensor::of(&x, 1), 0, 6);
      }
    }
  });
}

}  // namespace
}  // namespace tpcomm::testing
