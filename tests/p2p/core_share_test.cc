// CoreShareMeter: the verdict on a waiting thread's core (the progress thread's park period).
#include "p2p/core_share.h"

#include <gtest/gtest.h>

namespace tpcomm::p2p {
namespace {

constexpr int64_t kMs = 1000000;

TEST(CoreShare, FirstCallOpensAWindowWithoutAVerdict) {
  CoreShareMeter m(4 * kMs);
  EXPECT_TRUE(m.due(0));
  EXPECT_FALSE(m.close_window(100 * kMs, 7 * kMs).has_value());
}

TEST(CoreShare, DueOnlyOnceTheWindowHasPassed) {
  CoreShareMeter m(4 * kMs);
  m.close_window(10 * kMs, 0);
  EXPECT_FALSE(m.due(10 * kMs));
  EXPECT_FALSE(m.due(14 * kMs - 1));
  EXPECT_TRUE(m.due(14 * kMs));
}

TEST(CoreShare, AThreadThatGotItsCoreIsCalm) {
  CoreShareMeter m(4 * kMs);
  m.close_window(0, 50 * kMs);
  // 3.7 of 4 ms: 92.5%, over the 90% line (the progress thread's own looks cost a little).
  auto v = m.close_window(4 * kMs, 50 * kMs + 3700000);
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(*v);
}

TEST(CoreShare, AThreadThatLostItsCoreIsContendedAndTheVerdictFollowsEachWindow) {
  CoreShareMeter m(4 * kMs);
  m.close_window(0, 0);
  auto v = m.close_window(4 * kMs, 2 * kMs);  // half the core: another process ran
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(*v);
  v = m.close_window(8 * kMs, 6 * kMs);  // the next window had all of it
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(*v);
  v = m.close_window(12 * kMs, 6 * kMs + 3599999);  // just under 90%
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(*v);
}

TEST(CoreShare, AThreadThatBlockedReadsAsContended) {
  // A wait that slept (or a thread that blocked between waits) got little CPU time: the
  // verdict errs towards the frequent looks.
  CoreShareMeter m(4 * kMs);
  m.close_window(0, 0);
  auto v = m.close_window(500 * kMs, 5 * kMs);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(*v);
}

TEST(CoreShare, ClocksGoingBackwardsGiveNoVerdict) {
  CoreShareMeter m(4 * kMs);
  m.close_window(10 * kMs, 10 * kMs);
  EXPECT_FALSE(m.close_window(9 * kMs, 11 * kMs).has_value());
  EXPECT_FALSE(m.close_window(20 * kMs, 1 * kMs).has_value());
  // The meter restarted from the last reading: the next window is judged normally.
  auto v = m.close_window(24 * kMs, 5 * kMs);
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(*v);
}

TEST(CoreShare, TheThresholdIsAParameter) {
  CoreShareMeter m(1 * kMs, 50);
  m.close_window(0, 0);
  auto v = m.close_window(2 * kMs, 1 * kMs);  // exactly 50%: not under it
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(*v);
}

}  // namespace
}  // namespace tpcomm::p2p
