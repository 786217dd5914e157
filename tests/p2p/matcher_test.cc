// The matcher alone: sequencing, out-of-order arrival, any-source, posting order.
#include "p2p/matcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace tpcomm::p2p {
namespace {

std::vector<Match> arrive(Matcher& m, uint64_t g, int src, int tag, uint64_t seq, uint64_t id) {
  std::vector<Match> out;
  EXPECT_TRUE(m.arrive(ChannelKey{g, src, tag}, seq, id, &out));
  return out;
}

TEST(Matcher, PostedThenArrived) {
  Matcher m;
  EXPECT_EQ(m.post(1, 0, 5, 100), 0u);
  auto ms = arrive(m, 1, 0, 5, 0, 7);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].recv_id, 100u);
  EXPECT_EQ(ms[0].msg_id, 7u);
  EXPECT_EQ(m.posted(), 0u);
}

TEST(Matcher, ArrivedThenPosted) {
  Matcher m;
  EXPECT_TRUE(arrive(m, 1, 0, 5, 0, 7).empty());
  EXPECT_EQ(m.unexpected(), 1u);
  EXPECT_EQ(m.post(1, 0, 5, 100), 7u);
  EXPECT_EQ(m.unexpected(), 0u);
}

TEST(Matcher, OtherGroupOrTagDoesNotMatch) {
  Matcher m;
  m.post(1, 0, 5, 100);
  EXPECT_TRUE(arrive(m, 2, 0, 5, 0, 7).empty());
  EXPECT_TRUE(arrive(m, 1, 0, 6, 0, 8).empty());
  EXPECT_TRUE(arrive(m, 1, 3, 5, 0, 9).empty());
  EXPECT_EQ(m.unexpected(), 3u);
  EXPECT_EQ(m.posted(), 1u);
}

TEST(Matcher, OutOfOrderArrivalIsDeliveredInSequence) {
  Matcher m;
  m.post(1, 2, 0, 100);
  m.post(1, 2, 0, 101);
  m.post(1, 2, 0, 102);
  EXPECT_TRUE(arrive(m, 1, 2, 0, 2, 12).empty());  // early: waits for 0 and 1
  EXPECT_TRUE(arrive(m, 1, 2, 0, 1, 11).empty());
  auto ms = arrive(m, 1, 2, 0, 0, 10);
  ASSERT_EQ(ms.size(), 3u);
  EXPECT_EQ(ms[0].recv_id, 100u);
  EXPECT_EQ(ms[0].msg_id, 10u);
  EXPECT_EQ(ms[1].recv_id, 101u);
  EXPECT_EQ(ms[1].msg_id, 11u);
  EXPECT_EQ(ms[2].recv_id, 102u);
  EXPECT_EQ(ms[2].msg_id, 12u);
}

TEST(Matcher, DuplicateSequenceIsRefused) {
  Matcher m;
  std::vector<Match> out;
  EXPECT_TRUE(m.arrive(ChannelKey{1, 0, 0}, 0, 1, &out));
  EXPECT_FALSE(m.arrive(ChannelKey{1, 0, 0}, 0, 2, &out));
  EXPECT_TRUE(m.arrive(ChannelKey{1, 0, 0}, 3, 3, &out));
  EXPECT_FALSE(m.arrive(ChannelKey{1, 0, 0}, 3, 4, &out));
}

TEST(Matcher, AnySourceTakesTheEarliestReady) {
  Matcher m;
  arrive(m, 1, 3, 0, 0, 30);
  arrive(m, 1, 1, 0, 0, 10);
  arrive(m, 1, 2, 0, 0, 20);
  EXPECT_EQ(m.post(1, kAnySource, 0, 100), 30u);
  EXPECT_EQ(m.post(1, kAnySource, 0, 101), 10u);
  EXPECT_EQ(m.post(1, 2, 0, 102), 20u);
  EXPECT_EQ(m.post(1, kAnySource, 0, 103), 0u);
  auto ms = arrive(m, 1, 1, 0, 1, 11);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].recv_id, 103u);
}

TEST(Matcher, EarlierPostWinsBetweenSpecificAndAny) {
  Matcher m;
  m.post(1, kAnySource, 4, 100);
  m.post(1, 2, 4, 101);
  auto a = arrive(m, 1, 2, 4, 0, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].recv_id, 100u);
  auto b = arrive(m, 1, 2, 4, 1, 2);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].recv_id, 101u);
}

TEST(Matcher, CancelAndDropGroup) {
  Matcher m;
  m.post(1, 0, 0, 100);
  m.post(1, kAnySource, 0, 101);
  EXPECT_TRUE(m.cancel(100));
  EXPECT_FALSE(m.cancel(100));
  auto ms = arrive(m, 1, 0, 0, 0, 5);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].recv_id, 101u);
  arrive(m, 2, 0, 0, 0, 6);
  arrive(m, 2, 0, 0, 5, 7);
  m.post(2, 1, 0, 200);
  auto dropped = m.drop_group(2);
  std::sort(dropped.begin(), dropped.end());
  EXPECT_EQ(dropped, (std::vector<uint64_t>{6, 7}));
  EXPECT_EQ(m.unexpected(), 0u);
  EXPECT_EQ(m.posted(), 0u);
}

// arrive_posted (the latency path) pairs only the next message of a channel with that
// channel's earliest posted receive, and leaves every other case to arrive() untouched.
TEST(Matcher, ArrivePostedTakesOnlyTheSimpleCase) {
  Matcher m;
  EXPECT_EQ(m.arrive_posted(ChannelKey{1, 0, 5}, 0), 0u) << "nothing posted";
  m.post(1, 0, 5, 100);
  m.post(1, 0, 5, 101);
  EXPECT_EQ(m.arrive_posted(ChannelKey{1, 0, 5}, 1), 0u) << "out of order";
  EXPECT_EQ(m.posted(), 2u);
  EXPECT_EQ(m.arrive_posted(ChannelKey{1, 0, 5}, 0), 100u);
  EXPECT_EQ(m.arrive_posted(ChannelKey{1, 0, 5}, 1), 101u);
  EXPECT_EQ(m.posted(), 0u);
  EXPECT_EQ(m.expected(ChannelKey{1, 0, 5}), 2u);
  // A duplicate, an early arrival waiting, an any-source receive: the general path.
  m.post(1, 0, 5, 102);
  EXPECT_EQ(m.arrive_posted(ChannelKey{1, 0, 5}, 1), 0u);
  std::vector<Match> out;
  EXPECT_FALSE(m.arrive(ChannelKey{1, 0, 5}, 1, 9, &out)) << "duplicate";
  EXPECT_TRUE(m.arrive(ChannelKey{1, 0, 5}, 3, 10, &out));
  EXPECT_EQ(m.arrive_posted(ChannelKey{1, 0, 5}, 2), 0u) << "an early message waits";
  EXPECT_TRUE(m.arrive(ChannelKey{1, 0, 5}, 2, 11, &out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].recv_id, 102u);
  EXPECT_EQ(m.unexpected(), 1u);  // seq 3 is ready, unmatched
  EXPECT_EQ(m.post(1, 0, 5, 103), 10u);
  m.post(1, kAnySource, 7, 200);
  m.post(1, 0, 7, 201);
  EXPECT_EQ(m.arrive_posted(ChannelKey{1, 0, 7}, 0), 0u) << "an earlier any-source receive";
  out.clear();
  EXPECT_TRUE(m.arrive(ChannelKey{1, 0, 7}, 0, 12, &out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].recv_id, 200u);
  EXPECT_EQ(m.arrive_posted(ChannelKey{1, 0, 7}, 1), 201u);
  // The channel cache forgets a dropped group's channel.
  m.post(2, 0, 0, 300);
  EXPECT_EQ(m.drop_group(2).size(), 0u);
  EXPECT_EQ(m.posted(), 0u);
  EXPECT_EQ(m.arrive_posted(ChannelKey{2, 0, 0}, 0), 0u);
  EXPECT_EQ(m.expected(ChannelKey{2, 0, 0}), 0u);
}

// Random arrival orders of many messages over several sources always deliver every message
// exactly once, in per-source order.
TEST(Matcher, RandomOrdersDeliverEverythingInSequence) {
  std::mt19937 rng(42);
  for (int round = 0; round < 50; ++round) {
    Matcher m;
    const int sources = 4, per = 50;
    std::vector<std::pair<int, uint64_t>> msgs;
    for (int s = 0; s < sources; ++s)
      for (int q = 0; q < per; ++q) msgs.emplace_back(s, q);
    std::shuffle(msgs.begin(), msgs.end(), rng);
    std::vector<std::vector<uint64_t>> got(sources);
    uint64_t next_recv = 1;
    std::map<uint64_t, int> recv_src;
    for (size_t i = 0; i < msgs.size(); ++i) {
      if (rng() % 2) {
        int s = static_cast<int>(rng() % (sources + 1)) - 1;
        uint64_t id = next_recv++;
        uint64_t msg = m.post(7, s, 0, id);
        if (msg)
          got[(msg - 1) / 1000].push_back((msg - 1) % 1000);
        else
          recv_src[id] = s;
      }
      auto [s, q] = msgs[i];
      std::vector<Match> out;
      ASSERT_TRUE(m.arrive(ChannelKey{7, s, 0}, q, 1 + s * 1000 + q, &out));
      for (auto& mt : out) got[(mt.msg_id - 1) / 1000].push_back((mt.msg_id - 1) % 1000);
    }
    while (m.unexpected() > 0) {
      uint64_t msg = m.post(7, kAnySource, 0, next_recv++);
      ASSERT_NE(msg, 0u);
      got[(msg - 1) / 1000].push_back((msg - 1) % 1000);
    }
    for (int s = 0; s < sources; ++s) {
      ASSERT_EQ(got[s].size(), static_cast<size_t>(per)) << "source " << s;
      for (int q = 0; q < per; ++q) ASSERT_EQ(got[s][q], static_cast<uint64_t>(q));
    }
  }
}

}  // namespace
}  // namespace tpcomm::p2p
