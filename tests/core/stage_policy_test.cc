// StagePolicy: which stores a rank writes its staging chunks with, learned from its own
// timings (fed here by hand: deterministic).
#include "core/stage_policy.h"

#include <gtest/gtest.h>

#include <chrono>

namespace tpcomm {
namespace {

using std::chrono::nanoseconds;
constexpr size_t kChunk = size_t{2} << 20;

// Feeds `chunks` chunks to `p`: cached stores take `cached_ns` per chunk, streaming ones
// `streaming_ns`. Returns how many went in streaming.
int feed(StagePolicy& p, int chunks, long cached_ns, long streaming_ns) {
  int streamed = 0;
  for (int i = 0; i < chunks; ++i) {
    const bool nt = p.streaming();
    streamed += nt ? 1 : 0;
    p.record(nt, nt, kChunk, nanoseconds(nt ? streaming_ns : cached_ns));
  }
  return streamed;
}

TEST(StagePolicy, FixedModesNeverChange) {
  StagePolicy cached(StagePolicy::Mode::Cached), streaming(StagePolicy::Mode::Streaming);
  EXPECT_EQ(feed(cached, 100, 1000000, 100), 0);
  EXPECT_EQ(feed(streaming, 100, 100, 1000000), 100);
  EXPECT_EQ(cached.rate(false), 0.0);  // nothing learned
}

TEST(StagePolicy, MeasuresCachedThenStreamingThenKeepsTheFaster) {
  StagePolicy p;
  EXPECT_FALSE(p.streaming());
  p.record(false, false, kChunk, nanoseconds(600000));  // cached: 3.5 GB/s (cores far apart)
  EXPECT_TRUE(p.streaming());
  p.record(true, true, kChunk, nanoseconds(150000));  // streaming: 14 GB/s
  EXPECT_GT(p.rate(true), p.rate(false));
  // Streaming from now on, except a try of cached stores every so often.
  const int n = 1000;
  const int streamed = feed(p, n, 600000, 150000);
  EXPECT_GE(streamed, n - 12) << "tries of the slower kind back off";
  EXPECT_LT(streamed, n) << "the slower kind is still tried now and then";
}

TEST(StagePolicy, KeepsCachedWhereTheCoresShareACache) {
  StagePolicy p;
  const int streamed = feed(p, 1000, 160000, 200000);  // cached 13 GB/s, streaming 10.5
  EXPECT_LE(streamed, 12);
  EXPECT_GE(streamed, 1);  // the first measurement, then the backed-off tries
}

TEST(StagePolicy, FollowsAChangeOfPlacement) {
  StagePolicy p;
  feed(p, 200, 160000, 200000);  // cores close: cached
  EXPECT_GT(p.rate(false), p.rate(true));
  // The host moves a vCPU away: cached stores slow down at once, and the policy changes
  // within a few chunks (it is writing with them).
  int cached_after = 0;
  for (int i = 0; i < 50; ++i) {
    const bool nt = p.streaming();
    if (!nt && i >= 5) ++cached_after;
    p.record(nt, nt, kChunk, nanoseconds(nt ? 150000 : 600000));
  }
  EXPECT_LE(cached_after, 2);
  // And back: a try of cached stores finds them fast again within the backed-off interval,
  // after which only the tries of streaming stores remain.
  const int n = 2 * static_cast<int>(StagePolicy::kMaxProbe);
  int streamed_late = 0;
  for (int i = 0; i < n; ++i) {
    const bool nt = p.streaming();
    if (nt && i >= n / 2) ++streamed_late;
    p.record(nt, nt, kChunk, nanoseconds(nt ? 200000 : 120000));
  }
  EXPECT_LE(streamed_late, 3);
  EXPECT_GT(p.rate(false), p.rate(true));
}

TEST(StagePolicy, IgnoresEmptyRecords) {
  StagePolicy p;
  p.record(false, false, 0, nanoseconds(5));
  EXPECT_EQ(p.rate(false), 0.0);
  EXPECT_FALSE(p.streaming());
}

// A chunk asked to stream that went in cached (its staging side was misaligned) says nothing
// about the choice: neither estimate moves and the tries do not back off.
TEST(StagePolicy, IgnoresChunksThatCouldNotUseTheKindAsked) {
  StagePolicy p;
  feed(p, 50, 600000, 150000);  // streaming is the choice
  ASSERT_GT(p.rate(true), p.rate(false));
  const double cached = p.rate(false), streaming = p.rate(true);
  for (int i = 0; i < 100; ++i) p.record(true, false, kChunk, nanoseconds(100000));
  EXPECT_EQ(p.rate(false), cached);
  EXPECT_EQ(p.rate(true), streaming);
}

// Close rates (within the switching margin) keep the current kind: noise does not flip it.
TEST(StagePolicy, KeepsItsKindWhileTheOtherIsOnlySlightlyFaster) {
  StagePolicy p;
  feed(p, 100, 160000, 150000);  // streaming 7% faster: stays cached
  EXPECT_LE(feed(p, 1000, 160000, 150000), 12);
  StagePolicy q;
  feed(q, 100, 600000, 150000);  // streaming 4x faster: switches
  const int streamed = feed(q, 1000, 150000, 140000);  // cached back, but not clearly faster
  EXPECT_GE(streamed, 988) << "stays with streaming";
}

// Back to cached stores takes a smaller margin (10%) than the move to streaming ones (25%):
// after a far-placement spell chose streaming, cached stores 18% faster again win back, while
// streaming stores 18% faster never displace cached ones.
TEST(StagePolicy, ReturnsToCachedOnASmallerMargin) {
  StagePolicy p;
  feed(p, 100, 600000, 150000);  // far apart: streaming
  ASSERT_GT(p.rate(true), p.rate(false));
  const int n = 2 * static_cast<int>(StagePolicy::kMaxProbe);
  int streamed_late = 0;
  for (int i = 0; i < n; ++i) {  // close again: cached 13.1 GB/s, streaming 11.1
    const bool nt = p.streaming();
    if (nt && i >= n / 2) ++streamed_late;
    p.record(nt, nt, kChunk, nanoseconds(nt ? 189000 : 160000));
  }
  EXPECT_LE(streamed_late, 3) << "back to cached stores, streaming only tried";
  StagePolicy q;
  EXPECT_LE(feed(q, 1000, 189000, 160000), 12) << "streaming 18% faster: cached stays";
}

// Chunks that will not be timed take the current choice and never a try of the other kind.
TEST(StagePolicy, UnmeasuredChunksNeverTryTheOtherKind) {
  StagePolicy p;
  feed(p, 20, 600000, 150000);  // streaming is the choice
  for (int i = 0; i < 5000; ++i) ASSERT_TRUE(p.streaming(false)) << i;
  StagePolicy fresh;
  EXPECT_FALSE(fresh.streaming(false));  // nothing learned: cached
}

}  // namespace
}  // namespace tpcomm
