// The shm transport through the link-layer interface, two instances in one process: the
// handshake (and its refusals), messages of every size in order, ring-full back-pressure,
// puts of every size with notifications after the data (cross-memory and through the ring),
// range and key checks, clean shutdown, the blocking wait, and the size errors.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <cstring>
#include <set>
#include <thread>
#include <tuple>

#include "shm/shm_test_util.h"
#include "transports/shm/ring.h"
#include "transports/shm/segment.h"
#include "transports/shm/wire.h"

namespace tpcomm::transport::shm_test {
namespace {

class ShmTransportTest : public ShmTest {};

TEST_F(ShmTransportTest, CapabilitiesDescribeAHostTransport) {
  auto t = make_shm(0, 2);
  Capabilities c = t->capabilities();
  EXPECT_EQ(c.reach, Reach::Host);
  EXPECT_EQ(c.recv_slots, 0u);
  EXPECT_EQ(c.max_message, 16384u);
  EXPECT_TRUE(c.native_put);
  EXPECT_STREQ(t->name(), "shm");
  EXPECT_GE(t->wait_fd(), 0);
  EXPECT_THROW(t->register_memory(nullptr, 0, Device::cuda(0)), NotSupportedError);
}

TEST_F(ShmTransportTest, MessagesOfEverySizeArriveInOrder) {
  auto a = make_shm(0, 2), b = make_shm(1, 2);
  Sink sa, sb;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  size_t max = a->capabilities().max_message;
  std::vector<size_t> sizes;
  for (size_t s = 0; s <= 300; ++s) sizes.push_back(s);
  for (size_t s = 301; s < max; s += 211) sizes.push_back(s);
  sizes.push_back(max);
  size_t sent = 0;
  while (sent < sizes.size()) {
    size_t n = sizes[sent];
    std::vector<uint8_t> data(n);
    for (size_t j = 0; j < n; ++j) data[j] = pattern(sent, j);
    // Gather from three pieces.
    size_t c1 = n / 3, c2 = n / 2;
    iovec iov[3] = {{data.data(), c1}, {data.data() + c1, c2 - c1}, {data.data() + c2, n - c2}};
    PostStatus st = ab->send(iov);
    if (st == PostStatus::Ok) {
      ++sent;
    } else {
      ASSERT_EQ(st, PostStatus::NoResource);
      b->progress(sb);
    }
  }
  ASSERT_TRUE(
      pump({{a.get(), &sa}, {b.get(), &sb}}, [&] { return sb.messages.size() == sizes.size(); }));
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_EQ(sb.messages[i].size(), sizes[i]) << "message " << i;
    for (size_t j = 0; j < sizes[i]; ++j) ASSERT_EQ(sb.messages[i][j], pattern(i, j));
    EXPECT_EQ(sb.message_peers[i], 0);
  }
  // And the other way.
  uint64_t v = 0x1122334455667788ull;
  iovec one{&v, 8};
  ASSERT_EQ(ba->send({&one, 1}), PostStatus::Ok);
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}}, [&] { return sa.messages.size() == 1; }));
  EXPECT_EQ(sa.message_peers[0], 1);
  EXPECT_TRUE(sa.errors.empty() && sb.errors.empty());
}

TEST_F(ShmTransportTest, FullRingGivesNoResourceThenDrains) {
  set_env("TPCOMM_SHM_RING_SIZE", "64K");
  auto a = make_shm(0, 2), b = make_shm(1, 2);
  Sink sa, sb;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  std::vector<uint8_t> data(4000);
  int sent = 0;
  for (;; ++sent) {
    std::memcpy(data.data(), &sent, sizeof sent);
    iovec v{data.data(), data.size()};
    PostStatus st = ab->send({&v, 1});
    if (st == PostStatus::NoResource) break;
    ASSERT_EQ(st, PostStatus::Ok);
    ASSERT_LT(sent, 100) << "a 64K ring cannot hold 100 messages of 4000 bytes";
  }
  EXPECT_GT(sent, 10);
  ASSERT_TRUE(pump({{b.get(), &sb}}, [&] { return sb.messages.size() == size_t(sent); }));
  for (int i = 0; i < sent; ++i) {
    int got;
    std::memcpy(&got, sb.messages[i].data(), sizeof got);
    EXPECT_EQ(got, i);
  }
  iovec v{data.data(), data.size()};
  EXPECT_EQ(ab->send({&v, 1}), PostStatus::Ok);
}

TEST_F(ShmTransportTest, OversizedMessageIsRejected) {
  auto a = make_shm(0, 2), b = make_shm(1, 2);
  Sink sa, sb;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  std::vector<uint8_t> big(a->capabilities().max_message + 1);
  iovec v{big.data(), big.size()};
  try {
    (void)ab->send({&v, 1});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds max_message"), std::string::npos) << e.what();
  }
}

TEST_F(ShmTransportTest, PostsBeforeTheHandshakeGetNoResource) {
  auto a = make_shm(0, 2), b = make_shm(1, 2);
  Endpoint& ab = a->connect(1, b->address(), Clock::now() + 20s);
  EXPECT_FALSE(ab.ready());
  uint8_t x = 1;
  iovec v{&x, 1};
  EXPECT_EQ(ab.send({&v, 1}), PostStatus::NoResource);
  // connect() again returns the same endpoint; the peer's endpoint appears on accept.
  EXPECT_EQ(&a->connect(1, b->address(), Clock::now() + 20s), &ab);
  Sink sa, sb;
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}}, [&] { return ab.ready(); }));
  Endpoint& ba = b->connect(0, a->address(), Clock::now() + 20s);
  EXPECT_TRUE(ba.ready());
}

// Puts of many sizes, checked inside on_put_arrived (the data must be there already).
// `stage`: TPCOMM_SHM_STAGE_SIZE (the staging area of large shared puts; "0": none).
void run_puts(bool cma, bool shared = false, const char* stage = "0") {
  set_env("TPCOMM_SHM_CMA", cma ? "1" : "0");
  set_env("TPCOMM_SHM_SHARED_MIN", shared ? "1M" : "0");
  set_env("TPCOMM_SHM_STAGE_SIZE", stage);
  set_env("TPCOMM_SHM_STAGE_MIN", "1M");  // with CMA, staged from 1M (default 16M)
  auto a = make_shm(0, 2), b = make_shm(1, 2);
  EXPECT_EQ(a->capabilities().native_put, cma);
  Sink sa, sb;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  const size_t kBig = 64 << 20;
  std::vector<uint8_t> src(kBig + 64), dst(kBig + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = pattern(3, i);
  auto smr = a->register_memory(src.data(), src.size(), Device::cpu());
  auto dmr = b->register_memory(dst.data(), dst.size(), Device::cpu());
  RemoteKey key = dmr->remote_key();
  struct Case {
    size_t src_off, dst_off, len;
  };
  std::vector<Case> cases = {{0, 0, 0},     {0, 0, 1},          {1, 3, 7},
                             {5, 0, 4095},  {0, 11, 4097},      {13, 17, (1 << 20) + 7},
                             {0, 0, 65536}, {64, 32, kBig - 1}, {0, 0, kBig + 64}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    std::fill(dst.begin(), dst.end(), 0xEE);
    bool checked = false;
    sb.on_arrived = [&](uint32_t imm) {
      EXPECT_EQ(imm, 1000 + i);
      EXPECT_EQ(std::memcmp(dst.data() + c.dst_off, src.data() + c.src_off, c.len), 0)
          << "case " << i << ": data not in place at notification";
      if (c.dst_off > 0) {
        EXPECT_EQ(dst[c.dst_off - 1], 0xEE);
      }
      if (c.dst_off + c.len < dst.size()) {
        EXPECT_EQ(dst[c.dst_off + c.len], 0xEE);
      }
      checked = true;
    };
    size_t arrived = sb.arrived.size(), done = sa.done.size();
    PostStatus st;
    while ((st = ab->put(*smr, c.src_off, key, c.dst_off, c.len, 1000 + i, 77 + i)) ==
           PostStatus::NoResource) {
      a->progress(sa);
    }
    ASSERT_EQ(st, PostStatus::Ok);
    ASSERT_TRUE(
        pump({{a.get(), &sa}, {b.get(), &sb}},
             [&] { return sb.arrived.size() == arrived + 1 && sa.done.size() == done + 1; }))
        << "case " << i;
    EXPECT_TRUE(checked);
    EXPECT_EQ(sa.done.back(), std::make_pair(uint64_t{77 + i}, true));
  }
  EXPECT_TRUE(sa.errors.empty() && sb.errors.empty());
}

TEST_F(ShmTransportTest, PutsByCrossMemoryWrite) { run_puts(true); }
TEST_F(ShmTransportTest, PutsCopiedByBothEnds) { run_puts(true, true); }
TEST_F(ShmTransportTest, PutsThroughTheRingWhenCmaIsOff) { run_puts(false); }
// Large puts through the staging area: the default 4M of 1M chunks, and a small area of 16K
// chunks whose slots are refilled many times per put; with and without cross-memory access
// (staging needs none).
TEST_F(ShmTransportTest, PutsStagedByBothEnds) { run_puts(true, true, "4M"); }
TEST_F(ShmTransportTest, PutsStagedThroughASmallAreaWithoutCma) {
  set_env("TPCOMM_SHM_STAGE_CHUNK", "16K");
  run_puts(false, true, "48K");
}
// The staging chunks written with streaming stores, and with both kinds as auto learns
// (the tries of the other kind land mid-put): the data is in place at the notification.
TEST_F(ShmTransportTest, PutsStagedWithStreamingAndLearnedStores) {
  for (const char* stores : {"streaming", "auto"}) {
    SCOPED_TRACE(stores);
    set_env("TPCOMM_SHM_STAGE_STORES", stores);
    set_env("TPCOMM_SHM_STAGE_CHUNK", "16K");
    run_puts(true, true, "64K");
  }
}

// More puts in flight than there are shared-copy slots, interleaved with messages, in every
// put mode (staged, shared cross-memory copy, plain cross-memory write, through the ring).
TEST_F(ShmTransportTest, ManyPutsAndMessagesInterleaved) {
  for (const char* mode : {"staged", "shared", "cma", "ring"}) {
    SCOPED_TRACE(mode);
    const std::string m = mode;
    set_env("TPCOMM_SHM_CMA", m == "ring" ? "0" : "1");
    set_env("TPCOMM_SHM_SHARED_MIN", m == "shared" || m == "staged" ? "64K" : "0");
    set_env("TPCOMM_SHM_STAGE_SIZE", m == "staged" ? "128K" : "0");
    set_env("TPCOMM_SHM_STAGE_CHUNK", "32K");
    set_env("TPCOMM_SHM_STAGE_MIN", "0");
    set_env("TPCOMM_SHM_PUT_CHUNK", "64K");
    auto a = make_shm(0, 2), b = make_shm(1, 2);
    Sink sa, sb;
    Endpoint *ab, *ba;
    std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
    constexpr uint32_t kPuts = 40;
    constexpr size_t kLen = 256 << 10;
    std::vector<uint8_t> src(kLen), dst(kPuts * kLen);
    for (size_t i = 0; i < src.size(); ++i) src[i] = pattern(9, i);
    auto smr = a->register_memory(src.data(), src.size(), Device::cpu());
    auto dmr = b->register_memory(dst.data(), dst.size(), Device::cpu());
    for (uint32_t i = 0; i < kPuts; ++i) {
      while (ab->put(*smr, 0, dmr->remote_key(), i * kLen, kLen, i, i) != PostStatus::Ok) {
        a->progress(sa);
      }
      iovec v{&i, 4};
      while (ab->send({&v, 1}) != PostStatus::Ok) a->progress(sa), b->progress(sb);
    }
    ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}},
                     [&] { return sb.arrived.size() == kPuts && sa.done.size() == kPuts; }));
    EXPECT_EQ(sb.messages.size(), kPuts);
    std::set<uint32_t> imms(sb.arrived.begin(), sb.arrived.end());
    EXPECT_EQ(imms.size(), kPuts) << "every notification exactly once";
    for (uint32_t i = 0; i < kPuts; ++i)
      EXPECT_EQ(std::memcmp(dst.data() + i * kLen, src.data(), kLen), 0) << i;
    EXPECT_TRUE(sa.errors.empty() && sb.errors.empty());
  }
}

// A shared-copy put completed by either end alone: the receiver pulls everything the
// sender's first step left (and reports the arrival itself), or the sender writes it all
// before the receiver looks (and notifies it).
TEST_F(ShmTransportTest, SharedPutFinishedByEitherEnd) {
  set_env("TPCOMM_SHM_PUT_CHUNK", "1M");
  set_env("TPCOMM_SHM_STAGE_SIZE", "0");  // cross-memory copies: either end may finish
  for (bool receiver_finishes : {true, false}) {
    SCOPED_TRACE(receiver_finishes ? "receiver finishes" : "sender finishes");
    auto a = make_shm(0, 2), b = make_shm(1, 2);
    Sink sa, sb;
    Endpoint *ab, *ba;
    std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
    const size_t kLen = (16 << 20) + 3;
    std::vector<uint8_t> src(kLen), dst(kLen, 0);
    for (size_t i = 0; i < kLen; ++i) src[i] = pattern(4, i);
    auto smr = a->register_memory(src.data(), src.size(), Device::cpu());
    auto dmr = b->register_memory(dst.data(), dst.size(), Device::cpu());
    ASSERT_EQ(ab->put(*smr, 0, dmr->remote_key(), 0, kLen, 42, 7), PostStatus::Ok);
    if (receiver_finishes) {
      ASSERT_TRUE(pump({{b.get(), &sb}}, [&] { return sb.arrived.size() == 1; }));
      EXPECT_EQ(dst, src);
      EXPECT_TRUE(sa.done.empty());
      ASSERT_TRUE(pump({{a.get(), &sa}}, [&] { return sa.done.size() == 1; }));
    } else {
      ASSERT_TRUE(pump({{a.get(), &sa}}, [&] { return sa.done.size() == 1; }));
      EXPECT_EQ(dst, src);
      ASSERT_TRUE(pump({{b.get(), &sb}}, [&] { return sb.arrived.size() == 1; }));
    }
    EXPECT_EQ(sb.arrived[0], 42u);
    EXPECT_EQ(sa.done[0], std::make_pair(uint64_t{7}, true));
    // The slot is reused by the next puts.
    for (uint32_t i = 0; i < 40; ++i) {
      ASSERT_EQ(ab->put(*smr, 0, dmr->remote_key(), 0, 1 << 20, i, i), PostStatus::Ok);
      ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}},
                       [&] { return sb.arrived.size() == i + 2 && sa.done.size() == i + 2; }));
    }
    EXPECT_TRUE(sa.errors.empty() && sb.errors.empty());
  }
}

// Two connected transports (ranks 0 and 1) with a registered source of `len` pattern bytes on
// rank 0 and a zeroed destination of as many on rank 1: the staged-put tests' set-up.
struct PutPair {
  std::unique_ptr<Transport> a = make_shm(0, 2), b = make_shm(1, 2);
  Sink sa, sb;
  Endpoint* ab = nullptr;
  std::vector<uint8_t> src, dst;
  std::unique_ptr<MemoryRegion> smr, dmr;

  PutPair(size_t len, int seed) : src(len), dst(len, 0) {
    ab = connect_pair(*a, sa, 0, *b, sb, 1).first;
    for (size_t i = 0; i < len; ++i) src[i] = pattern(seed, i);
    smr = a->register_memory(src.data(), src.size(), Device::cpu());
    dmr = b->register_memory(dst.data(), dst.size(), Device::cpu());
  }
};

// A staged put without cross-memory access needs both ends: the sender alone fills the
// staging area and stops; the receiver alone drains what is there and waits for more; the put
// completes (data in place at the arrival, then the sender's completion) only with both
// progressing. The slots are then reused by the next puts.
TEST_F(ShmTransportTest, StagedPutNeedsBothEndsAndReusesItsSlots) {
  set_env("TPCOMM_SHM_CMA", "0");
  set_env("TPCOMM_SHM_PUT_CHUNK", "1M");
  set_env("TPCOMM_SHM_STAGE_SIZE", "256K");
  set_env("TPCOMM_SHM_STAGE_CHUNK", "64K");
  const size_t kLen = (4 << 20) + 5;
  PutPair p(kLen, 6);
  auto &a = p.a, &b = p.b;  // (plain references: clang 14 cannot capture bindings)
  Sink &sa = p.sa, &sb = p.sb;
  Endpoint* ab = p.ab;
  auto &src = p.src, &dst = p.dst;
  auto &smr = p.smr, &dmr = p.dmr;
  ASSERT_EQ(ab->put(*smr, 0, dmr->remote_key(), 0, kLen, 42, 7), PostStatus::Ok);
  for (int i = 0; i < 20; ++i) a->progress(sa);
  for (int i = 0; i < 20; ++i) b->progress(sb);
  EXPECT_TRUE(sa.done.empty());
  EXPECT_TRUE(sb.arrived.empty());
  // The first 4 chunks (the whole area) arrived; nothing beyond.
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), 256 << 10), 0);
  EXPECT_EQ(dst[256 << 10], 0);
  bool in_place = false;
  sb.on_arrived = [&](uint32_t) { in_place = dst == src; };
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}},
                   [&] { return sb.arrived.size() == 1 && sa.done.size() == 1; }));
  EXPECT_TRUE(in_place) << "data not in place at the notification";
  EXPECT_EQ(sb.arrived[0], 42u);
  EXPECT_EQ(sa.done[0], std::make_pair(uint64_t{7}, true));
  sb.on_arrived = nullptr;
  for (uint32_t i = 0; i < 40; ++i) {
    ASSERT_EQ(ab->put(*smr, i, dmr->remote_key(), 0, (1 << 20) + i, i, i), PostStatus::Ok);
    ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}},
                     [&] { return sb.arrived.size() == i + 2 && sa.done.size() == i + 2; }));
    ASSERT_EQ(std::memcmp(dst.data(), src.data() + i, (1 << 20) + i), 0) << i;
  }
  EXPECT_TRUE(sa.errors.empty() && sb.errors.empty());
}

// With cross-memory access, a receiver that does not drain the full staging area does not
// hold the sender up: after a stall the sender writes the remaining chunks straight into the
// destination; the staged ones complete when the receiver drains them.
TEST_F(ShmTransportTest, StagedPutGoesOnWhileTheReceiverStalls) {
  set_env("TPCOMM_SHM_STAGE_MIN", "1M");
  set_env("TPCOMM_SHM_STAGE_SIZE", "256K");
  set_env("TPCOMM_SHM_STAGE_CHUNK", "64K");
  const size_t kLen = (2 << 20) + 9;
  PutPair p(kLen, 8);
  auto &a = p.a, &b = p.b;  // (plain references: clang 14 cannot capture bindings)
  Sink &sa = p.sa, &sb = p.sb;
  Endpoint* ab = p.ab;
  auto &src = p.src, &dst = p.dst;
  auto &smr = p.smr, &dmr = p.dmr;
  ASSERT_EQ(ab->put(*smr, 0, dmr->remote_key(), 0, kLen, 5, 6), PostStatus::Ok);
  const size_t staged = 256 << 10;  // the first four chunks fill the area
  // Once the receiver has stalled, the sender writes chunk after chunk (its own writes do not
  // restart the stall clock): the progress call that writes the first one writes them all
  // (TPCOMM_SHM_PUT_CHUNK, 4M, covers the rest).
  ASSERT_TRUE(pump({{a.get(), &sa}}, [&] {
    return std::memcmp(dst.data() + staged, src.data() + staged, 4096) == 0;
  })) << "the sender did not write past the full staging area";
  EXPECT_EQ(std::memcmp(dst.data() + staged, src.data() + staged, kLen - staged), 0)
      << "the sender wrote only part of the rest in the step that found the receiver stalled";
  EXPECT_TRUE(sa.done.empty()) << "the staged chunks are not in place yet";
  EXPECT_EQ(dst[0], 0);
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}},
                   [&] { return sb.arrived.size() == 1 && sa.done.size() == 1; }));
  EXPECT_EQ(dst, src);
  EXPECT_EQ(sb.arrived[0], 5u);
  EXPECT_TRUE(sa.errors.empty() && sb.errors.empty());
}

// With cross-memory access, the receiver of a staged put does not wait for the sender's
// (slower) copy: finding nothing staged, it pulls pages from the put's end itself
// (TPCOMM_SHM_STAGE_PULL). A sender that staged the first chunks and then stops progressing
// leaves the rest to the receiver, which completes the put alone (data in place at its
// arrival, an odd-sized last page included); the sender then finds it done. With pulls off,
// the receiver drains what is staged and waits.
TEST_F(ShmTransportTest, StagedPutReceiverPullsFromTheEnd) {
  set_env("TPCOMM_SHM_STAGE_MIN", "1M");
  set_env("TPCOMM_SHM_STAGE_SIZE", "256K");
  set_env("TPCOMM_SHM_STAGE_CHUNK", "64K");
  for (bool pull : {true, false}) {
    SCOPED_TRACE(pull ? "pulls" : "no pulls");
    set_env("TPCOMM_SHM_STAGE_PULL", pull ? "128K" : "0");
    const size_t kLen = (2 << 20) + 9;
    PutPair p(kLen, 10);
    auto &a = p.a, &b = p.b;  // (plain references: clang 14 cannot capture bindings)
    Sink &sa = p.sa, &sb = p.sb;
    auto &src = p.src, &dst = p.dst;
    // The post stages the first four chunks (the whole area) and stops there.
    ASSERT_EQ(p.ab->put(*p.smr, 0, p.dmr->remote_key(), 0, kLen, 3, 4), PostStatus::Ok);
    bool in_place = false;
    sb.on_arrived = [&](uint32_t) { in_place = dst == src; };
    if (pull) {
      ASSERT_TRUE(pump({{b.get(), &sb}}, [&] { return sb.arrived.size() == 1; }))
          << "the receiver did not complete the put by itself";
      EXPECT_TRUE(in_place) << "data not in place at the notification";
      EXPECT_EQ(sb.arrived[0], 3u);
      EXPECT_TRUE(sa.done.empty());
      ASSERT_TRUE(pump({{a.get(), &sa}}, [&] { return sa.done.size() == 1; }));
    } else {
      for (int i = 0; i < 50; ++i) b->progress(sb);
      EXPECT_TRUE(sb.arrived.empty());
      EXPECT_EQ(std::memcmp(dst.data(), src.data(), 256 << 10), 0);
      EXPECT_EQ(dst[256 << 10], 0) << "pulled although TPCOMM_SHM_STAGE_PULL=0";
      ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}},
                       [&] { return sb.arrived.size() == 1 && sa.done.size() == 1; }));
      EXPECT_TRUE(in_place) << "data not in place at the notification";
    }
    EXPECT_EQ(sa.done[0], std::make_pair(uint64_t{4}, true));
    // The slot and the area serve the next puts, copied by both ends at once.
    sb.on_arrived = nullptr;
    for (uint32_t i = 0; i < 8; ++i) {
      ASSERT_EQ(p.ab->put(*p.smr, i, p.dmr->remote_key(), 0, (1 << 20) + 4096 * i + i, i, i),
                PostStatus::Ok);
      ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}},
                       [&] { return sb.arrived.size() == i + 2 && sa.done.size() == i + 2; }));
      ASSERT_EQ(std::memcmp(dst.data(), src.data() + i, (1 << 20) + 4096 * i + i), 0) << i;
    }
    EXPECT_TRUE(sa.errors.empty() && sb.errors.empty());
  }
}

// TPCOMM_SHM_STAGE_PULL must be a multiple of the page.
TEST_F(ShmTransportTest, StagePullMustBeWholePages) {
  set_env("TPCOMM_SHM_STAGE_PULL", "1000");
  try {
    auto a = make_shm(0, 2);
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("TPCOMM_SHM_STAGE_PULL=1000"), std::string::npos)
        << e.what();
  }
}

TEST_F(ShmTransportTest, PutRangeAndKeyChecks) {
  auto a = make_shm(0, 2), b = make_shm(1, 2), c = make_shm(0, 2);
  Sink sa, sb;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  std::vector<uint8_t> src(100), dst(100);
  auto smr = a->register_memory(src.data(), src.size(), Device::cpu());
  auto dmr = b->register_memory(dst.data(), dst.size(), Device::cpu());
  auto expect_invalid = [&](auto fn, const char* what) {
    try {
      fn();
      ADD_FAILURE() << "expected InvalidArgument: " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_invalid([&] { (void)ab->put(*smr, 90, dmr->remote_key(), 0, 11, 0, 0); }, "source range");
  expect_invalid([&] { (void)ab->put(*smr, 0, dmr->remote_key(), 95, 6, 0, 0); },
                 "destination range");
  expect_invalid([&] { (void)ab->put(*smr, 0, dmr->remote_key(), SIZE_MAX, 2, 0, 0); },
                 "destination range");
  // A key of another instance (c), or no shm key at all.
  auto cmr = c->register_memory(dst.data(), dst.size(), Device::cpu());
  expect_invalid([&] { (void)ab->put(*smr, 0, cmr->remote_key(), 0, 1, 0, 0); }, "another process");
  RemoteKey junk = dmr->remote_key();
  junk.blob_size = 3;
  expect_invalid([&] { (void)ab->put(*smr, 0, junk, 0, 1, 0, 0); }, "not an shm key");
}

TEST_F(ShmTransportTest, RingPutIntoDeregisteredRegionFailsThePeer) {
  set_env("TPCOMM_SHM_CMA", "0");
  auto a = make_shm(0, 2), b = make_shm(1, 2);
  Sink sa, sb;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  std::vector<uint8_t> src(100), dst(100);
  auto smr = a->register_memory(src.data(), src.size(), Device::cpu());
  auto dmr = b->register_memory(dst.data(), dst.size(), Device::cpu());
  RemoteKey key = dmr->remote_key();
  dmr.reset();
  ASSERT_EQ(ab->put(*smr, 0, key, 0, 10, 5, 5), PostStatus::Ok);
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}},
                   [&] { return !sb.errors.empty() && !sa.errors.empty(); }));
  EXPECT_NE(sb.errors[0].second.find("not registered here"), std::string::npos)
      << sb.errors[0].second;
  EXPECT_EQ(sb.errors[0].first, 0);
  EXPECT_EQ(sa.errors[0].first, 1);
  uint8_t x = 0;
  iovec v{&x, 1};
  EXPECT_EQ(ab->send({&v, 1}), PostStatus::PeerFailed);
}

TEST_F(ShmTransportTest, HandshakeRefusesAnotherJob) {
  auto a = make_shm(0, 2, "job-a"), b = make_shm(1, 2, "job-b");
  Sink sa, sb;
  Endpoint& ab = a->connect(1, b->address(), Clock::now() + 20s);
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}}, [&] { return !sa.errors.empty(); }));
  EXPECT_FALSE(ab.ready());
  EXPECT_EQ(sa.errors[0].first, 1);
  const std::string& m = sa.errors[0].second;
  EXPECT_NE(m.find("refused"), std::string::npos) << m;
  EXPECT_NE(m.find("job id 'job-a'"), std::string::npos) << m;
  EXPECT_NE(m.find("'job-b'"), std::string::npos) << m;
  uint8_t x = 0;
  iovec v{&x, 1};
  EXPECT_EQ(ab.send({&v, 1}), PostStatus::PeerFailed);
  EXPECT_TRUE(sb.messages.empty());
}

TEST_F(ShmTransportTest, HandshakeRefusesTheWrongRank) {
  auto a = make_shm(0, 3), b = make_shm(1, 3);
  Sink sa, sb;
  a->connect(2, b->address(), Clock::now() + 20s);  // b is rank 1, not 2
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}}, [&] { return !sa.errors.empty(); }));
  EXPECT_NE(sa.errors[0].second.find("addressed to rank 2, this is rank 1"), std::string::npos)
      << sa.errors[0].second;
  // World size mismatch.
  auto c = make_shm(0, 4);
  Sink sc;
  c->connect(1, b->address(), Clock::now() + 20s);
  ASSERT_TRUE(pump({{c.get(), &sc}, {b.get(), &sb}}, [&] { return !sc.errors.empty(); }));
  EXPECT_NE(sc.errors[0].second.find("world size 4"), std::string::npos) << sc.errors[0].second;
}

TEST_F(ShmTransportTest, MalformedAddressesThrow) {
  auto a = make_shm(0, 2);
  std::vector<uint8_t> junk = {1, 2, 3, 4, 5};
  EXPECT_THROW(a->connect(1, junk, Clock::now() + 1s), TransportError);
  EXPECT_THROW(a->connect(5, a->address(), Clock::now() + 1s), InvalidArgument);
}

TEST_F(ShmTransportTest, GarbageOnTheSocketIsRefusedAndHarmless) {
  auto a = make_shm(0, 2), b = make_shm(1, 2);
  shm::PeerInfo info = shm::decode_address(b->address(), "b");
  int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, info.socket_name.data(), info.socket_name.size());
  socklen_t len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + info.socket_name.size());
  ASSERT_EQ(::connect(s, reinterpret_cast<sockaddr*>(&addr), len), 0);
  const char junk[] = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_GT(::send(s, junk, sizeof junk, 0), 0);
  Sink sa, sb;
  char reply[4096];
  ssize_t got = -1;
  ASSERT_TRUE(pump({{b.get(), &sb}}, [&] {
    got = ::recv(s, reply, sizeof reply, MSG_DONTWAIT);
    return got > 0;
  }));
  shm::Control c;
  ASSERT_EQ(shm::decode_control({reinterpret_cast<uint8_t*>(reply), size_t(got)}, &c), "");
  EXPECT_EQ(c.type, shm::ControlType::Refuse);
  EXPECT_NE(c.reason.find("bad magic"), std::string::npos) << c.reason;
  ::close(s);
  // b still works.
  connect_pair(*a, sa, 0, *b, sb, 1);
  EXPECT_TRUE(sb.errors.empty());
}

TEST_F(ShmTransportTest, ConnectionNotReadyByTheDeadlineIsReported) {
  auto a = make_shm(0, 2), b = make_shm(1, 2);  // b never progresses
  Sink sa;
  Endpoint& ab = a->connect(1, b->address(), Clock::now() + 200ms);
  ASSERT_TRUE(pump(
      {{a.get(), &sa}}, [&] { return !sa.errors.empty(); }, 10s));
  EXPECT_FALSE(ab.ready());
  EXPECT_NE(sa.errors[0].second.find("not ready by the deadline"), std::string::npos)
      << sa.errors[0].second;
}

TEST_F(ShmTransportTest, CleanShutdownDeliversWhatWasSentThenReports) {
  auto a = make_shm(0, 2), b = make_shm(1, 2);
  Sink sa, sb;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  for (uint32_t i = 0; i < 5; ++i) {
    iovec v{&i, 4};
    ASSERT_EQ(ba->send({&v, 1}), PostStatus::Ok);
  }
  b.reset();
  ASSERT_TRUE(pump({{a.get(), &sa}}, [&] { return !sa.errors.empty(); }));
  EXPECT_EQ(sa.messages.size(), 5u) << "messages sent before the shutdown are delivered first";
  EXPECT_EQ(sa.errors.size(), 1u);
  EXPECT_NE(sa.errors[0].second.find("shut down"), std::string::npos) << sa.errors[0].second;
  uint8_t x = 0;
  iovec v{&x, 1};
  EXPECT_EQ(ab->send({&v, 1}), PostStatus::PeerFailed);
}

// The receiver sleeps on wait_fd() after arm(); a message from another thread wakes it.
TEST_F(ShmTransportTest, DoorbellWakesASleepingReceiver) {
  auto a = make_shm(0, 2), b = make_shm(1, 2);
  Sink sa, sb;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  for (int round = 0; round < 3; ++round) {
    while (b->progress(sb) > 0) {
    }
    ASSERT_TRUE(b->arm());
    std::thread sender([&, round]() mutable {
      std::this_thread::sleep_for(50ms);
      iovec v{&round, sizeof round};
      while (ab->send({&v, 1}) != PostStatus::Ok) a->progress(sa);
    });
    pollfd pf{b->wait_fd(), POLLIN, 0};
    int rc = ::poll(&pf, 1, 10000);
    sender.join();
    EXPECT_EQ(rc, 1) << "the sleeping receiver was not woken";
    ASSERT_TRUE(pump({{b.get(), &sb}}, [&] { return sb.messages.size() == size_t(round + 1); }));
  }
}

// A sender blocked on a full ring sleeps, and the receiver's draining wakes it.
TEST_F(ShmTransportTest, DrainingWakesASleepingSender) {
  set_env("TPCOMM_SHM_RING_SIZE", "64K");
  auto a = make_shm(0, 2), b = make_shm(1, 2);
  Sink sa, sb;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  std::vector<uint8_t> data(8000);
  iovec v{data.data(), data.size()};
  while (ab->send({&v, 1}) == PostStatus::Ok) {
  }
  while (a->progress(sa) > 0) {
  }
  ASSERT_TRUE(a->arm());
  std::thread drainer([&] {
    std::this_thread::sleep_for(50ms);
    b->progress(sb);
  });
  pollfd pf{a->wait_fd(), POLLIN, 0};
  int rc = ::poll(&pf, 1, 10000);
  drainer.join();
  EXPECT_EQ(rc, 1) << "the blocked sender was not woken";
  a->progress(sa);
  EXPECT_EQ(ab->send({&v, 1}), PostStatus::Ok);
}

TEST_F(ShmTransportTest, ArmSaysWhenWorkIsPending) {
  auto a = make_shm(0, 2), b = make_shm(1, 2);
  Sink sa, sb;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  uint8_t x = 1;
  iovec v{&x, 1};
  ASSERT_EQ(ab->send({&v, 1}), PostStatus::Ok);
  EXPECT_FALSE(b->arm()) << "a message is waiting";
  b->progress(sb);
  EXPECT_TRUE(b->arm());
  // A finished put's completion is pending until progress() reports it.
  std::vector<uint8_t> buf(64);
  auto smr = a->register_memory(buf.data(), buf.size(), Device::cpu());
  auto dmr = b->register_memory(buf.data(), buf.size(), Device::cpu());
  ASSERT_EQ(ab->put(*smr, 0, dmr->remote_key(), 0, 8, 1, 1), PostStatus::Ok);
  EXPECT_FALSE(a->arm());
  a->progress(sa);
  EXPECT_EQ(sa.done.size(), 1u);
}

TEST_F(ShmTransportTest, DevShmTooSmallNamesBothSizes) {
  shm::FsSpace sp = shm::fs_space("/dev/shm");
  if (sp.total == 0) GTEST_SKIP() << "no /dev/shm";
  uint64_t want = (sp.free + (uint64_t(4) << 30)) & ~uint64_t(4095);
  set_env("TPCOMM_SHM_RING_SIZE", std::to_string(want).c_str());
  try {
    make_shm(0, 2);
    FAIL() << "expected TransportError";
  } catch (const TransportError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(shm::format_bytes(want + shm::kRingHeaderBytes)), std::string::npos) << m;
    EXPECT_NE(m.find("/dev/shm has only"), std::string::npos) << m;
    EXPECT_NE(m.find("free"), std::string::npos) << m;
    EXPECT_NE(m.find("TPCOMM_SHM_RING_SIZE"), std::string::npos) << m;
  }
}

TEST_F(ShmTransportTest, BadSettingsNameTheVariable) {
  set_env("TPCOMM_SHM_RING_SIZE", "1000");
  try {
    make_shm(0, 2);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("TPCOMM_SHM_RING_SIZE=1000"), std::string::npos)
        << e.what();
  }
  set_env("TPCOMM_SHM_RING_SIZE", nullptr);
  set_env("TPCOMM_SHM_PUT_CHUNK", "10");
  EXPECT_THROW(make_shm(0, 2), ConfigError);
  set_env("TPCOMM_SHM_PUT_CHUNK", nullptr);
  for (const char* bad : {"1M", "1000000", "2G"}) {  // one 1M chunk, less than two, over 1G
    set_env("TPCOMM_SHM_STAGE_SIZE", bad);
    try {
      make_shm(0, 2);
      FAIL() << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("TPCOMM_SHM_STAGE_SIZE=") + bad),
                std::string::npos)
          << e.what();
    }
  }
}

TEST_F(ShmTransportTest, ConnectToSelf) {
  auto a = make_shm(0, 1);
  Sink sa;
  Endpoint& aa = a->connect(0, a->address(), Clock::now() + 20s);
  ASSERT_TRUE(pump({{a.get(), &sa}}, [&] { return aa.ready(); }));
  uint32_t x = 5;
  iovec v{&x, 4};
  ASSERT_EQ(aa.send({&v, 1}), PostStatus::Ok);
  ASSERT_TRUE(pump({{a.get(), &sa}}, [&] { return sa.messages.size() == 1; }));
}

}  // namespace
}  // namespace tpcomm::transport::shm_test
