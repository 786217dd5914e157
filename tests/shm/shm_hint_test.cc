// ShmTransport::maybe_pending(), the lock-free hint a spinning waiter reads instead of taking
// the engine lock: true whenever progress() has something to do (an arrival, a pad record at
// the read position, a put, an undelivered event, a lazily unpublished read position, an
// armed sleep), false once progress() has done it all; and safe to call from another thread
// while the transport connects, moves messages, loses its peer and compacts its reader list.
#include <atomic>
#include <thread>
#include <tuple>

#include "shm/shm_test_util.h"

namespace tpcomm::transport::shm_test {
namespace {

class ShmHintTest : public ShmTest {};

// Progresses `t` until its hint turns false; false when it never does within `rounds` calls.
bool settle(Transport& t, Sink& s, int rounds = 64) {
  for (int i = 0; i < rounds; ++i) {
    if (!t.maybe_pending()) return true;
    t.progress(s);
  }
  return !t.maybe_pending();
}

TEST_F(ShmHintTest, TrueFromArrivalUntilProgressTookIt) {
  auto a = make_shm(0, 2), b = make_shm(1, 2);
  Sink sa, sb;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  ASSERT_TRUE(settle(*a, sa)) << "an idle, connected transport keeps saying work is pending";
  ASSERT_TRUE(settle(*b, sb));
  for (uint32_t i = 0; i < 100; ++i) {
    iovec v{&i, sizeof i};
    ASSERT_EQ(ab->send({&v, 1}), PostStatus::Ok);
    EXPECT_TRUE(b->maybe_pending()) << "message " << i << " is in b's ring";
    EXPECT_TRUE(a->maybe_pending()) << "the send's doorbell check waits for a's progress()";
    size_t before = sb.messages.size();
    b->progress(sb);
    ASSERT_EQ(sb.messages.size(), before + 1);
    ASSERT_TRUE(settle(*b, sb, 4)) << "after message " << i;
    ASSERT_TRUE(settle(*a, sa, 4)) << "after message " << i;
  }
}

// Records of mixed sizes wrap the ring with pad records: the hint follows the read position
// past them (a stale probe on a consumed pad would say "pending" forever).
TEST_F(ShmHintTest, FollowsTheReadPositionAcrossWraps) {
  set_env("TPCOMM_SHM_RING_SIZE", "64K");
  auto a = make_shm(0, 2), b = make_shm(1, 2);
  Sink sa, sb;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  std::vector<uint8_t> data(12000, 7);
  size_t sent = 0;
  for (int i = 0; i < 400; ++i) {
    size_t n = 1 + (static_cast<size_t>(i) * 677) % data.size();
    iovec v{data.data(), n};
    if (ab->send({&v, 1}) == PostStatus::Ok) {
      ++sent;
      EXPECT_TRUE(b->maybe_pending());
    }
    if (i % 3 == 2) {
      ASSERT_TRUE(settle(*b, sb)) << "after " << sent << " messages";
      ASSERT_EQ(sb.messages.size(), sent);
      a->progress(sa);
    }
  }
  ASSERT_TRUE(settle(*b, sb));
  EXPECT_EQ(sb.messages.size(), sent);
  EXPECT_GT(sent, 200u);
}

TEST_F(ShmHintTest, PutsAndArmedSleepsArePending) {
  auto a = make_shm(0, 2), b = make_shm(1, 2);
  Sink sa, sb;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  ASSERT_TRUE(settle(*a, sa));
  std::vector<uint8_t> src(4096, 3), dst(4096, 0);
  auto smr = a->register_memory(src.data(), src.size(), Device::cpu());
  auto dmr = b->register_memory(dst.data(), dst.size(), Device::cpu());
  ASSERT_EQ(ab->put(*smr, 0, dmr->remote_key(), 0, src.size(), 9, 42), PostStatus::Ok);
  EXPECT_TRUE(a->maybe_pending()) << "the put's completion is not reported yet";
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}},
                   [&] { return sa.done.size() == 1 && sb.arrived.size() == 1; }));
  EXPECT_EQ(dst[4095], 3);
  ASSERT_TRUE(settle(*a, sa));
  ASSERT_TRUE(settle(*b, sb));
  // An armed transport needs one progress() to clear its sleeping flags.
  ASSERT_TRUE(b->arm());
  EXPECT_TRUE(b->maybe_pending());
  b->progress(sb);
  EXPECT_TRUE(settle(*b, sb));
}

// A lost peer's ring is no longer read: once its error is delivered, the hint is false even
// though records may sit in that ring.
TEST_F(ShmHintTest, LostPeerStopsCounting) {
  auto a = make_shm(0, 2), b = make_shm(1, 2);
  Sink sa, sb;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  uint32_t x = 1;
  iovec v{&x, sizeof x};
  ASSERT_EQ(ba->send({&v, 1}), PostStatus::Ok);
  b.reset();
  ASSERT_TRUE(pump({{a.get(), &sa}}, [&] { return !sa.errors.empty(); }));
  EXPECT_TRUE(settle(*a, sa));
}

// Another thread reads the hint without any lock while this one connects, moves a few
// thousand messages both ways, and loses the peer (its reader list compacts): nothing here
// may crash or be reported by the sanitizers, and every message arrives.
TEST_F(ShmHintTest, SafeFromAnotherThreadThroughConnectTrafficAndLoss) {
  auto a = make_shm(0, 3), b = make_shm(1, 3), c = make_shm(2, 3);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> looks{0}, seen_true{0};
  std::thread reader([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      if (a->maybe_pending()) seen_true.fetch_add(1, std::memory_order_relaxed);
      looks.fetch_add(1, std::memory_order_relaxed);
    }
  });
  Sink sa, sb, sc;
  Endpoint *ab, *ba, *ac, *ca;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  std::tie(ac, ca) = connect_pair(*a, sa, 0, *c, sc, 2);
  const uint32_t n = 3000;
  uint32_t sent_b = 0, sent_c = 0;
  while (sent_b < n || sent_c < n) {
    iovec vb{&sent_b, sizeof sent_b}, vc{&sent_c, sizeof sent_c};
    if (sent_b < n && ba->send({&vb, 1}) == PostStatus::Ok) ++sent_b;
    if (sent_c < n && ca->send({&vc, 1}) == PostStatus::Ok) ++sent_c;
    a->progress(sa);
    b->progress(sb);
    c->progress(sc);
  }
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}, {c.get(), &sc}},
                   [&] { return sa.messages.size() == 2 * n; }));
  c.reset();  // a loses rank 2: its reader entry is compacted away
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}}, [&] { return !sa.errors.empty(); }));
  uint32_t more = 7;
  iovec vm{&more, sizeof more};
  ASSERT_EQ(ba->send({&vm, 1}), PostStatus::Ok);
  ASSERT_TRUE(
      pump({{a.get(), &sa}, {b.get(), &sb}}, [&] { return sa.messages.size() == 2 * n + 1; }));
  // The reader sees an arrival that this thread has not taken yet (the hint stays true until
  // a's progress()), and then looks at the settled transport for a moment.
  ASSERT_TRUE(settle(*a, sa));
  uint64_t trues = seen_true.load();
  uint32_t last = 8;
  iovec vl{&last, sizeof last};
  ASSERT_EQ(ba->send({&vl, 1}), PostStatus::Ok);
  auto end = Clock::now() + 20s;
  while (seen_true.load() == trues && Clock::now() < end) std::this_thread::yield();
  EXPECT_GT(seen_true.load(), trues) << "the reader thread never saw the pending message";
  ASSERT_TRUE(
      pump({{a.get(), &sa}, {b.get(), &sb}}, [&] { return sa.messages.size() == 2 * n + 2; }));
  ASSERT_TRUE(settle(*a, sa));
  uint64_t at = looks.load();
  end = Clock::now() + 20s;
  while (looks.load() < at + 1000 && Clock::now() < end) std::this_thread::yield();
  stop = true;
  reader.join();
  EXPECT_GT(looks.load(), at) << "the reader thread made no progress";
  EXPECT_FALSE(a->maybe_pending());
}

}  // namespace
}  // namespace tpcomm::transport::shm_test
