// Tier (b): matching semantics and the process-group API over each transport: any-source
// receives, tags, ordering, thousands of outstanding operations, batches, subgroups, the
// free functions, eager connection, the rendezvous threshold, a TCPStore rendezvous.
#include <algorithm>
#include <set>
#include <thread>

#include "p2p/p2p_test_util.h"
#include "pg/group_state.h"

namespace tpcomm::testing {
namespace {

class Semantics : public ::testing::TestWithParam<std::string> {};

TEST_P(Semantics, AnySourceReturnsTheSender) {
  std::string tr = GetParam();
  auto r = run_ranks(4, [&](RankContext& c) {
    InitOptions o;
    o.backend = tr;
    o.store = c.store;
    o.rank = c.rank;
    o.world_size = c.world_size;
    init_process_group(o);
    ASSERT_TRUE(is_initialized());
    EXPECT_EQ(get_rank(), c.rank);
    EXPECT_EQ(get_world_size(), 4);
    EXPECT_EQ(get_backend(), tr);
    if (c.rank == 0) {
      std::set<int> seen;
      for (int i = 0; i < 3; ++i) {
        int32_t v = -1;
        int src = recv(Tensor::of(&v, 1), kAnySource);
        EXPECT_EQ(v, src * 10) << "payload names its sender";
        seen.insert(src);
      }
      EXPECT_EQ(seen, (std::set<int>{1, 2, 3}));
      // Large messages too (rendezvous), any source.
      std::vector<int32_t> big(100000);
      for (int i = 0; i < 3; ++i) {
        int src = recv(Tensor::of(big), kAnySource, nullptr, 7);
        EXPECT_EQ(big[99999], src);
      }
    } else {
      int32_t v = c.rank * 10;
      auto w = send(Tensor::of(&v, 1), 0);
      EXPECT_TRUE(w->is_completed());
      std::vector<int32_t> big(100000, c.rank);
      send(Tensor::of(big), 0, nullptr, 7);
    }
    destroy_process_group();
    EXPECT_FALSE(is_initialized());
  });
  EXPECT_RANKS_OK(r);
}

TEST_P(Semantics, TagsMatchAndSameTagKeepsOrder) {
  std::string tr = GetParam();
  auto r = run_ranks(2, [&](RankContext& c) {
    auto pg = make_world(c, tr);
    if (c.rank == 1) {
      for (int tag : {3, 2, 1}) {
        int64_t v = tag * 100;
        pg->send(Tensor::of(&v, 1), 0, tag);
      }
      std::vector<int64_t> seq(50);
      std::vector<std::shared_ptr<Work>> works;
      for (int64_t i = 0; i < 50; ++i) {
        seq[i] = i;
        works.push_back(pg->isend(Tensor::of(&seq[i], 1), 0, 9));
      }
      for (auto& w : works) w->wait();
      std::vector<float> big(50000, 1.5f);
      for (int i = 0; i < 3; ++i) {
        big[0] = static_cast<float>(i);
        pg->send(Tensor::of(big), 0, 11);  // rendezvous, same tag: in order too
      }
    } else {
      for (int tag : {1, 2, 3}) {
        int64_t v = 0;
        pg->recv(Tensor::of(&v, 1), 1, tag);
        EXPECT_EQ(v, tag * 100);
      }
      for (int64_t i = 0; i < 50; ++i) {
        int64_t v = -1;
        pg->recv(Tensor::of(&v, 1), 1, 9);
        ASSERT_EQ(v, i) << "messages of one tag overtook each other";
      }
      std::vector<float> big(50000);
      for (int i = 0; i < 3; ++i) {
        pg->recv(Tensor::of(big), 1, 11);
        EXPECT_EQ(big[0], static_cast<float>(i));
      }
    }
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

// A blocking send of a small message goes out at once when it can (ProcessGroup::send's
// latency path, Engine::send_now) and otherwise through the general path: behind a
// rendezvous send still waiting for its receive, and while the peer does not receive (the
// transport's room runs out, sends queue, then go out), every message keeps its place.
TEST_P(Semantics, BlockingSendsKeepOrderBehindPendingAndQueuedSends) {
  std::string tr = GetParam();
  constexpr int kMany = 4000;
  constexpr size_t kElems = 512;  // 2 KiB: eager on every transport
  auto r = run_ranks(2, [&](RankContext& c) {
    auto pg = make_world(c, tr);
    if (c.rank == 1) {
      std::vector<int32_t> big(200000, 7);
      auto pending = pg->isend(Tensor::of(big), 0, 5);  // rendezvous: waits for rank 0
      for (int32_t i = 0; i < 3; ++i) {
        auto w = pg->send(Tensor::of(&i, 1), 0, 5);
        EXPECT_TRUE(w->is_completed());
        EXPECT_TRUE(w->is_success());
        EXPECT_EQ(w->exception(), nullptr);
        EXPECT_EQ(w->source_rank(), -1);
        EXPECT_TRUE(w->wait());
      }
      pending->wait();
      // 8 MB of blocking sends while rank 0 sleeps before receiving: more than a ring or a
      // socket buffer holds, so some of them wait in the link's queue.
      std::vector<int32_t> m(kElems);
      for (int32_t i = 0; i < kMany; ++i) {
        m[0] = i;
        m[kElems - 1] = -i;
        pg->send(Tensor::of(m), 0, 6);
      }
    } else {
      std::vector<int32_t> big(200000);
      pg->recv(Tensor::of(big), 1, 5);
      EXPECT_EQ(big[199999], 7);
      for (int32_t i = 0; i < 3; ++i) {
        int32_t v = -1;
        pg->recv(Tensor::of(&v, 1), 1, 5);
        EXPECT_EQ(v, i) << "a blocking send overtook the rendezvous before it";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::vector<int32_t> m(kElems);
      for (int32_t i = 0; i < kMany; ++i) {
        pg->recv(Tensor::of(m), 1, 6);
        ASSERT_EQ(m[0], i) << "blocking sends arrived out of order";
        ASSERT_EQ(m[kElems - 1], -i);
      }
    }
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

TEST_P(Semantics, TenThousandOutstandingSmallIsends) {
  std::string tr = GetParam();
  auto r = run_ranks(2, [&](RankContext& c) {
    auto pg = make_world(c, tr);
    const int n = 10000;
    std::vector<int32_t> vals(n);
    std::vector<std::shared_ptr<Work>> works;
    works.reserve(n);
    if (c.rank == 0) {
      for (int i = 0; i < n; ++i) {
        vals[i] = i;
        works.push_back(pg->isend(Tensor::of(&vals[i], 1), 1, i % 7));
      }
    } else {
      std::fill(vals.begin(), vals.end(), -1);
      // Half posted before the messages can arrive, half after.
      for (int i = 0; i < n / 2; ++i) works.push_back(pg->irecv(Tensor::of(&vals[i], 1), 0, i % 7));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      for (int i = n / 2; i < n; ++i) works.push_back(pg->irecv(Tensor::of(&vals[i], 1), 0, i % 7));
    }
    for (auto& w : works) w->wait();
    if (c.rank == 1) {
      for (int i = 0; i < n; ++i) ASSERT_EQ(vals[i], i);
    }
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

TEST_P(Semantics, BatchIsendIrecvRing) {
  std::string tr = GetParam();
  auto r = run_ranks(3, [&](RankContext& c) {
    InitOptions o;
    o.backend = tr;
    o.store = c.store;
    o.rank = c.rank;
    o.world_size = c.world_size;
    init_process_group(o);
    int n = 3, me = c.rank;
    std::vector<double> out(1000, me), in(1000, -1);
    std::vector<P2POp> ops = {P2POp(isend, Tensor::of(out), (me + 1) % n),
                              P2POp(irecv, Tensor::of(in), (me + n - 1) % n)};
    for (auto& w : batch_isend_irecv(ops)) w->wait();
    EXPECT_EQ(in[999], (me + n - 1) % n);
    // A bad entry posts nothing.
    std::vector<P2POp> bad = {P2POp(P2POp::Kind::Send, Tensor::of(out), (me + 1) % n),
                              P2POp(P2POp::Kind::Recv, Tensor::of(in), 17)};
    EXPECT_NE(error_of<InvalidArgument>([&] { batch_isend_irecv(bad); }).find("out of range"),
              std::string::npos);
    destroy_process_group();
  });
  EXPECT_RANKS_OK(r);
}

// Groups made by different subsets, in different orders, with the same tags: no message
// crosses groups and group stores never collide.
TEST_P(Semantics, SubgroupsInDifferentOrders) {
  std::string tr = GetParam();
  auto r = run_ranks(4, [&](RankContext& c) {
    auto world = make_world(c, tr);
    int me = c.rank;
    std::shared_ptr<ProcessGroup> pair, cross;
    if (me < 2) {
      pair = world->new_group({0, 1});
      cross = world->new_group({me, me + 2});
    } else {
      cross = world->new_group({me - 2, me});
      pair = world->new_group({2, 3});
    }
    auto nonmember = world->new_group({(me + 1) % 4, (me + 2) % 4});
    EXPECT_EQ(nonmember->rank(), -1);
    EXPECT_NE(error_of<InvalidArgument>([&] {
                int32_t x = 0;
                nonmember->send(Tensor::of(&x, 1), 0);
              }).find("not a member"),
              std::string::npos);
    ASSERT_EQ(pair->size(), 2);
    ASSERT_EQ(cross->size(), 2);
    EXPECT_EQ(pair->global_rank(pair->rank()), me);
    // Disjoint groups with identical store keys: each sees its own value.
    pair->state().store->set("k", std::to_string(me / 2));
    EXPECT_EQ(pair->state().store->get_string("k"), std::to_string(me / 2));
    // Same tag on both groups at once, payload names the group.
    int32_t a_out = 100 + me, b_out = 200 + me, a_in = -1, b_in = -1;
    int pp = 1 - pair->rank(), cp = 1 - cross->rank();
    auto w1 = cross->irecv(Tensor::of(&b_in, 1), cp, 0);
    auto w2 = pair->irecv(Tensor::of(&a_in, 1), pp, 0);
    cross->send(Tensor::of(&b_out, 1), cp, 0);
    pair->send(Tensor::of(&a_out, 1), pp, 0);
    w1->wait();
    w2->wait();
    EXPECT_EQ(a_in, 100 + pair->global_rank(pp));
    EXPECT_EQ(b_in, 200 + cross->global_rank(cp));
    // Free-function rank translation.
    EXPECT_EQ(get_group_rank(cross, me), cross->rank());
    EXPECT_EQ(get_global_rank(cross, cross->rank()), me);
    EXPECT_EQ(get_process_group_ranks(pair),
              me < 2 ? (std::vector<int>{0, 1}) : (std::vector<int>{2, 3}));
    pair->destroy();
    EXPECT_NE(error_of<InvalidArgument>([&] {
                int32_t x = 0;
                pair->send(Tensor::of(&x, 1), pp);
              }).find("destroyed"),
              std::string::npos);
    // The world still works after a subgroup is gone.
    int32_t x = me, y = -1;
    auto rw = world->irecv(Tensor::of(&y, 1), (me + 3) % 4);
    world->send(Tensor::of(&x, 1), (me + 1) % 4);
    rw->wait();
    EXPECT_EQ(y, (me + 3) % 4);
    world->destroy();
  });
  EXPECT_RANKS_OK(r);
}

TEST_P(Semantics, EagerConnectAndThresholds) {
  std::string tr = GetParam();
  for (const char* threshold : {"0", "1M"}) {
    RunOptions opt;
    opt.env = {{"TPCOMM_CONNECT", "eager"}, {"TPCOMM_RNDV_THRESHOLD", threshold}};
    auto r = run_ranks(
        3,
        [&](RankContext& c) {
          auto pg = make_world(c, tr);
          int me = c.rank, n = 3;
          for (size_t bytes : {size_t(1), size_t(5000), size_t(200000)}) {
            std::vector<uint8_t> out(bytes), in(bytes);
            fill_pattern(out, DType::UInt8, me);
            auto rw = pg->irecv(Tensor::of(in), (me + n - 1) % n);
            pg->send(Tensor::of(out), (me + 1) % n);
            rw->wait();
            ASSERT_EQ(check_pattern(in, DType::UInt8, (me + n - 1) % n), -1) << bytes;
          }
          pg->destroy();
        },
        opt);
    EXPECT_RANKS_OK(r) << "TPCOMM_RNDV_THRESHOLD=" << threshold;
  }
}

TEST_P(Semantics, OverTcpStore) {
  std::string tr = GetParam();
  RunOptions opt;
  opt.tcp_store = true;
  auto r = run_ranks(
      3,
      [&](RankContext& c) {
        auto pg = make_world(c, tr);
        int32_t x = c.rank, y = -1;
        auto rw = pg->irecv(Tensor::of(&y, 1), (c.rank + 2) % 3);
        pg->send(Tensor::of(&x, 1), (c.rank + 1) % 3);
        rw->wait();
        EXPECT_EQ(y, (c.rank + 2) % 3);
        pg->destroy();
      },
      opt);
  EXPECT_RANKS_OK(r);
}

INSTANTIATE_TEST_SUITE_P(P2P, Semantics, ::testing::ValuesIn(p2p_transports()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tpcomm::testing
