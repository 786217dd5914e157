// Transport::allocate_memory over UCX: memory from ucp_mem_map ALLOCATE. Over UCX's
// shared memory the peer maps it, so a put into it is ucp_put_nbx, one-sided: it completes,
// every byte in place, while the target never progresses. Into the user's own memory the same
// put goes as tagged messages and needs the target. Over UCX's tcp (RMA emulated there) puts
// into allocated memory also go as tagged messages, and arrive. Two transports in one
// process, once per lane; bad requests fail clearly.
#include <cstdio>
#include <cstring>

#include "common/transport_test_util.h"
#include "ucx/ucx_test_util.h"

namespace tpcomm::testing {
namespace {

using namespace std::chrono_literals;
using transport::Endpoint;
using transport::PostStatus;
using transport::Transport;
using transport::test_util::pump;
using transport::test_util::set_env;
using transport::test_util::Sink;

class UcxAlloc : public UcxPairTest {
 protected:
  void SetUp() override { set_up_pair("ucx-alloc"); }
  bool shm() const { return GetParam().name == "shm"; }
};

uint8_t pattern(size_t i, int seed) { return static_cast<uint8_t>(i * 31 + (i >> 12) + seed); }

// Puts of several sizes (and offsets) into the peer's allocated region: over shared memory they
// complete with only the sender progressing, and the bytes are there before the target has run
// at all; the notification then arrives at the target. Over tcp the target must progress.
TEST_P(UcxAlloc, PutsIntoAllocatedMemory) {
  constexpr size_t kLen = (4u << 20) + 3;
  auto src = t[0]->allocate_memory(kLen, Device::cpu());
  auto dst = t[1]->allocate_memory(kLen, Device::cpu());
  ASSERT_EQ(src->length(), kLen);
  ASSERT_EQ(dst->length(), kLen);
  ASSERT_NE(dst->addr(), nullptr);
  EXPECT_EQ(dst->remote_key().addr, reinterpret_cast<uintptr_t>(dst->addr()));
  EXPECT_EQ(dst->remote_key().length, kLen);
  EXPECT_GT(dst->remote_key().blob_size, 0u) << "an allocated region always carries its rkey";
  auto* in = static_cast<uint8_t*>(src->addr());
  auto* out = static_cast<uint8_t*>(dst->addr());
  int seed = 0;
  for (size_t len : {size_t{1}, size_t{4096}, size_t{65537}, size_t{1} << 20, kLen - 5}) {
    ++seed;
    size_t off = len < kLen - 5 ? 5 : 0;
    for (size_t i = 0; i < len; ++i) in[off + i] = pattern(i, seed);
    std::memset(out, 0, kLen);
    uint64_t cookie = 100 + seed;
    auto imm = static_cast<uint32_t>(seed);
    ASSERT_EQ(ep01->put(*src, off, dst->remote_key(), off, len, imm, cookie), PostStatus::Ok);
    if (shm()) {
      // One-sided: rank 1 does not progress until rank 0's put is done.
      ASSERT_TRUE(pump({{t[0].get(), &s[0]}}, [&] { return !s[0].done.empty(); }))
          << len << " bytes: the put did not complete without the target";
      for (size_t i = 0; i < len; ++i)
        ASSERT_EQ(out[off + i], pattern(i, seed)) << len << " bytes, byte " << i;
      EXPECT_TRUE(s[1].arrived.empty());
    }
    ASSERT_TRUE(both([&] { return !s[0].done.empty() && !s[1].arrived.empty(); }))
        << len << " bytes";
    ASSERT_EQ(s[0].done.size(), 1u);
    EXPECT_EQ(s[0].done[0], std::make_pair(cookie, true));
    ASSERT_EQ(s[1].arrived.size(), 1u);
    EXPECT_EQ(s[1].arrived[0], imm);
    for (size_t i = 0; i < len; ++i)
      ASSERT_EQ(out[off + i], pattern(i, seed)) << len << " bytes, byte " << i;
    EXPECT_EQ(out[off == 0 ? kLen - 1 : 0], 0) << "a byte outside the put was written";
    s[0].done.clear();
    s[1].arrived.clear();
  }
  EXPECT_TRUE(s[0].errors.empty() && s[1].errors.empty());
}

// A window of puts into allocated memory, all in flight at once, each with its notification:
// every one completes and arrives once, in any order.
TEST_P(UcxAlloc, AWindowOfPuts) {
  constexpr size_t kPiece = 256 << 10;
  constexpr int kWindow = 32;
  auto src = t[0]->allocate_memory(kPiece * kWindow, Device::cpu());
  auto dst = t[1]->allocate_memory(kPiece * kWindow, Device::cpu());
  auto* in = static_cast<uint8_t*>(src->addr());
  for (size_t i = 0; i < kPiece * kWindow; ++i) in[i] = pattern(i, 7);
  std::memset(dst->addr(), 0, dst->length());
  for (int i = 0; i < kWindow; ++i) {
    size_t off = static_cast<size_t>(i) * kPiece;
    PostStatus st;
    while ((st = ep01->put(*src, off, dst->remote_key(), off, kPiece, i, i)) ==
           PostStatus::NoResource) {
      t[0]->progress(s[0]);
      t[1]->progress(s[1]);
    }
    ASSERT_EQ(st, PostStatus::Ok);
  }
  ASSERT_TRUE(both([&] {
    return s[0].done.size() == kWindow && s[1].arrived.size() == kWindow;
  }));
  std::vector<int> seen(kWindow, 0);
  for (uint32_t imm : s[1].arrived) ++seen.at(imm);
  for (auto& [cookie, ok] : s[0].done) EXPECT_TRUE(ok) << cookie;
  EXPECT_EQ(seen, std::vector<int>(kWindow, 1));
  EXPECT_EQ(std::memcmp(dst->addr(), src->addr(), dst->length()), 0);
}

// The lines of /proc/self/maps: one per mapping of this process.
size_t mappings() {
  std::FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return 0;
  size_t n = 0;
  for (int c; (c = std::fgetc(f)) != EOF;) n += c == '\n';
  std::fclose(f);
  return n;
}

// The target allocates, is put into, and frees one region after another (more than the
// initiator keeps mapped keys for): every put lands in the current region, and the initiator
// does not keep every freed region's segment attached (each cached key that UCX mapped holds
// one: they are dropped after 64).
TEST_P(UcxAlloc, ManyTargetsInTurn) {
  auto src = t[0]->allocate_memory(4096, Device::cpu());
  const size_t before = mappings();
  for (int i = 0; i < 150; ++i) {
    std::memset(src->addr(), i, 4096);
    auto dst = t[1]->allocate_memory(1 << 20, Device::cpu());
    ASSERT_EQ(ep01->put(*src, 0, dst->remote_key(), (1 << 20) - 4096, 4096, i, i),
              PostStatus::Ok);
    ASSERT_TRUE(both([&] { return s[0].done.size() == 1 && s[1].arrived.size() == 1; }))
        << "region " << i;
    auto* out = static_cast<uint8_t*>(dst->addr()) + (1 << 20) - 4096;
    ASSERT_EQ(out[0], static_cast<uint8_t>(i));
    ASSERT_EQ(out[4095], static_cast<uint8_t>(i));
    s[0].done.clear();
    s[1].arrived.clear();
  }
  EXPECT_LT(mappings(), before + 100) << "the freed regions' segments stay attached";
}

// Into the user's own memory the put goes as tagged messages: it cannot complete while the
// target never progresses (UCX maps only memory it allocated), and does once it does.
TEST_P(UcxAlloc, PutsIntoUserMemoryNeedTheTarget) {
  constexpr size_t kLen = 1 << 20;
  std::vector<uint8_t> user(kLen, 0);
  auto src = t[0]->allocate_memory(kLen, Device::cpu());
  std::memset(src->addr(), 0x3c, kLen);
  auto dst = t[1]->register_memory(user.data(), kLen, Device::cpu());
  ASSERT_EQ(ep01->put(*src, 0, dst->remote_key(), 0, kLen, 9, 9), PostStatus::Ok);
  EXPECT_FALSE(pump({{t[0].get(), &s[0]}}, [&] { return !s[0].done.empty(); }, 200ms))
      << "a put into user memory completed without the target";
  ASSERT_TRUE(both([&] { return !s[0].done.empty() && !s[1].arrived.empty(); }));
  EXPECT_EQ(user, std::vector<uint8_t>(kLen, 0x3c));
}

// Length 0 gives an empty region; other devices are refused with a clear error; the regions
// free their memory (many allocations in a row do not pile up).
TEST_P(UcxAlloc, EmptyOtherDevicesAndRepeats) {
  auto empty = t[0]->allocate_memory(0, Device::cpu());
  EXPECT_EQ(empty->length(), 0u);
  EXPECT_TRUE(contains(error_of<NotSupportedError>([&] {
                         (void)t[0]->allocate_memory(4096, Device::cuda(0));
                       }),
                       "host memory only"));
  for (int i = 0; i < 200; ++i) {
    auto r = t[1]->allocate_memory(8 << 20, Device::cpu());
    static_cast<uint8_t*>(r->addr())[(8 << 20) - 1] = 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Lanes, UcxAlloc, kUcxLanes, lane_name);

}  // namespace
}  // namespace tpcomm::testing
