// The registration cache of the ibverbs transport on the test device, two transport
// instances in one process: the same buffer registers once; munmap + mmap at the same address,
// madvise(MADV_DONTNEED) and a freed large malloc block (glibc unmaps it internally) each drop
// the entry, so the next use registers again; a bounded cache evicts; TPCOMM_IB_REG_CACHE_SIZE=0
// registers per call. Every transfer is checked byte for byte. Registrations are counted by the
// test device (tpfake_get_stats).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../ibverbs_device/fake_verbs.h"
#include "core/config.h"
#include "tpcomm/store.hpp"
#include "tpcomm/transport/transport.hpp"
#include "transports/ibverbs/mem_monitor.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

namespace tpcomm::testing {
namespace {

const char* kFake = TPCOMM_TEST_BIN_DIR "/libtpcomm_fake_verbs.so";

struct Sink : transport::EventSink {
  std::vector<uint32_t> arrived;
  std::map<uint64_t, bool> done;
  std::map<int, std::string> errors;
  void on_message(int, std::span<const uint8_t>) override {}
  void on_put_arrived(int, uint32_t imm) override { arrived.push_back(imm); }
  void on_put_done(uint64_t c, bool ok) override { done[c] = ok; }
  void on_peer_error(int p, const std::string& r) override { errors[p] = r; }
};

class IbvRegCache : public ::testing::Test {
 protected:
  void start(const char* cache_size) {
    if (!transport::has_transport("ibverbs"))
      GTEST_SKIP() << "this build has no ibverbs transport (no rdma-core headers)";
    if (access(kFake, R_OK) != 0) GTEST_SKIP() << "the test device " << kFake << " is not built";
    std::string why;
    if (!ibv::memmon::available(&why))
      GTEST_SKIP() << "no userfaultfd memory monitor here, so nothing is cached: " << why;
    h_ = dlopen(kFake, RTLD_NOW);
    ASSERT_NE(h_, nullptr);
    stats_ = reinterpret_cast<int (*)(const char*, tpfake_stats*)>(dlsym(h_, "tpfake_get_stats"));
    ASSERT_NE(stats_, nullptr);
    setenv("TPCOMM_IBVERBS_LIB", kFake, 1);
    setenv("TPCOMM_IB_REG_CACHE_SIZE", cache_size, 1);
    config::reload();
    auto store = std::make_shared<HashStore>();
    store->set_timeout(std::chrono::seconds(30));
    for (int r = 0; r < 2; ++r) {
      transport::TransportContext c;
      c.rank = r;
      c.world_size = 2;
      c.job_id = "ibv-cache-test";
      c.host_id = "h";
      c.store = store;
      t_[r] = transport::create_transport("ibverbs", c);
    }
    auto dl = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    a_ = &t_[0]->connect(1, t_[1]->address(), dl);
    transport::Endpoint* b = nullptr;
    ASSERT_TRUE(until([&] {
      if (b == nullptr && a_->ready()) b = &t_[1]->connect(0, t_[0]->address(), dl);
      return b != nullptr && b->ready();
    }));
    dst_.assign(8 << 20, 0);
    rdst_ = t_[1]->register_memory(dst_.data(), dst_.size(), Device::cpu());
  }
  void TearDown() override {
    rdst_.reset();
    t_[0].reset();
    t_[1].reset();
    unsetenv("TPCOMM_IBVERBS_LIB");
    unsetenv("TPCOMM_IB_REG_CACHE_SIZE");
    config::reload();
    if (h_) dlclose(h_);
  }
  template <class F>
  bool until(F done) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      t_[0]->progress(s_[0]);
      t_[1]->progress(s_[1]);
      if (done()) return true;
    }
    return false;
  }
  uint64_t regs() {
    tpfake_stats s{};
    stats_("tpfake0", &s);
    return s.reg_mr;
  }
  // Registers `len` bytes at p (filled with `seed`'s pattern), puts them into dst_, checks the
  // bytes, releases the region; returns the registrations this took.
  uint64_t send_from(uint8_t* p, size_t len, int seed) {
    for (size_t i = 0; i < len; ++i) p[i] = static_cast<uint8_t>(i * 7 + seed);
    uint64_t before = regs();
    auto r = t_[0]->register_memory(p, len, Device::cpu());
    uint64_t cookie = ++cookie_;
    EXPECT_EQ(a_->put(*r, 0, rdst_->remote_key(), 0, len, 1, cookie), transport::PostStatus::Ok);
    EXPECT_TRUE(until([&] { return s_[0].done.count(cookie) > 0; }));
    EXPECT_TRUE(s_[0].done[cookie]);
    EXPECT_EQ(std::memcmp(p, dst_.data(), len), 0) << "seed " << seed;
    return regs() - before;
  }
  static uint8_t* map(size_t len, void* at = nullptr) {
    void* p = mmap(at, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED_NOREPLACE : 0), -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }

  void* h_ = nullptr;
  int (*stats_)(const char*, tpfake_stats*) = nullptr;
  std::unique_ptr<transport::Transport> t_[2];
  Sink s_[2];
  transport::Endpoint* a_ = nullptr;
  std::vector<uint8_t> dst_;
  std::unique_ptr<transport::MemoryRegion> rdst_;
  uint64_t cookie_ = 0;
};

TEST_F(IbvRegCache, SameBufferRegistersOnce) {
  start("64");
  const size_t len = 256 << 10;
  uint8_t* p = map(len);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(send_from(p, len, 1), 1u);
  EXPECT_EQ(send_from(p, len, 2), 0u);          // reused
  EXPECT_EQ(send_from(p + 4096, 8192, 3), 0u);  // a range inside it: reused
  munmap(p, len);
}

TEST_F(IbvRegCache, MunmapThenMmapAtTheSameAddressRegistersAgain) {
  start("64");
  const size_t len = 256 << 10;
  uint8_t* p = map(len);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(send_from(p, len, 1), 1u);
  ASSERT_EQ(munmap(p, len), 0);
  uint8_t* q = map(len, p);  // same address, new pages
  ASSERT_EQ(q, p) << "MAP_FIXED_NOREPLACE did not give the same address";
  EXPECT_EQ(send_from(q, len, 2), 1u);  // the old entry was dropped
  EXPECT_EQ(send_from(q, len, 3), 0u);  // and the new one is cached
  munmap(q, len);
}

TEST_F(IbvRegCache, MadviseDontneedDropsTheEntry) {
  start("64");
  const size_t len = 256 << 10;
  uint8_t* p = map(len);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(send_from(p, len, 1), 1u);
  ASSERT_EQ(madvise(p + 8192, 4096, MADV_DONTNEED), 0);
  EXPECT_EQ(p[8192], 0);                // the page was dropped (and faults in fresh)
  EXPECT_EQ(send_from(p, len, 2), 1u);  // registered again
  munmap(p, len);
}

TEST_F(IbvRegCache, MremapMovingTheBlockDropsTheEntry) {
  start("64");
  const size_t len = 256 << 10;
  uint8_t* p = map(len + 4096);  // the last page stays behind: growing must move the rest
  ASSERT_NE(p, nullptr);
  uint8_t* guard = p + len;
  EXPECT_EQ(send_from(p, len, 1), 1u);
  auto* moved = static_cast<uint8_t*>(mremap(p, len, 2 * len, MREMAP_MAYMOVE));
  ASSERT_NE(moved, MAP_FAILED);
  ASSERT_NE(moved, p);
  uint8_t* q = map(len, p);  // new pages at the old address
  ASSERT_EQ(q, p);
  EXPECT_EQ(send_from(q, len, 2), 1u);
  EXPECT_EQ(send_from(moved, 2 * len > dst_.size() ? dst_.size() : 2 * len, 3), 1u);
  munmap(q, len);
  munmap(moved, 2 * len);
  munmap(guard, 4096);
}

TEST_F(IbvRegCache, FreedLargeMallocBlockIsNotReused) {
  start("64");
  // A fixed threshold (no dynamic raise after earlier frees): blocks of this size are mmap'd
  // and free() unmaps them internally.
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
  const size_t len = 8 << 20;  // more than the heap has free: its own mapping
  auto* p = static_cast<uint8_t*>(std::malloc(len));
  ASSERT_NE(p, nullptr);
  // glibc's chunk header: bit 1 of the size word marks a chunk with its own mapping.
  size_t head = 0;
  std::memcpy(&head, reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) - sizeof(head)),
              sizeof(head));
  ASSERT_TRUE(head & 2) << "the block came from the heap";
  EXPECT_EQ(send_from(p, len, 1), 1u);
  std::free(p);
  auto* q = static_cast<uint8_t*>(std::malloc(len));  // often the same address
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(send_from(q, len, 2), 1u) << (p == q ? "same address" : "another address");
  EXPECT_EQ(send_from(q, len, 3), 0u);
  std::free(q);
}

TEST_F(IbvRegCache, BoundedCacheEvictsTheLeastRecentlyUsed) {
  start("2");
  const size_t len = 64 << 10;
  uint8_t* p[3];
  for (auto& x : p) ASSERT_NE(x = map(len), nullptr);
  EXPECT_EQ(send_from(p[0], len, 1), 1u);
  EXPECT_EQ(send_from(p[1], len, 2), 1u);
  EXPECT_EQ(send_from(p[0], len, 3), 0u);  // p[0] most recent now
  EXPECT_EQ(send_from(p[2], len, 4), 1u);  // evicts p[1]
  EXPECT_EQ(send_from(p[0], len, 5), 0u);
  EXPECT_EQ(send_from(p[1], len, 6), 1u);
  for (auto& x : p) munmap(x, len);
}

TEST_F(IbvRegCache, SizeZeroRegistersPerCall) {
  start("0");
  const size_t len = 64 << 10;
  uint8_t* p = map(len);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(send_from(p, len, 1), 1u);
  EXPECT_EQ(send_from(p, len, 2), 1u);
  munmap(p, len);
}

}  // namespace
}  // namespace tpcomm::testing
