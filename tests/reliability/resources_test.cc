// Resources (issue: never hang silently): no file descriptors, threads or shared-memory
// segments leak across many create/destroy cycles of a world and of subgroups, and a sender
// with 10,000 outstanding isends to a peer that does not receive stays within bounded memory.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "common/multiproc.h"
#include "tpcomm/tpcomm.hpp"

namespace tpcomm::testing {
namespace {

int count_entries(const char* dir, const char* prefix = "") {
  DIR* d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  size_t pl = std::strlen(prefix);
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    if (std::strncmp(e->d_name, prefix, pl) == 0) ++n;
  }
  closedir(d);
  return n;
}

int open_fds() { return count_entries("/proc/self/fd") - 1; }  // minus the DIR's own fd
int threads() { return count_entries("/proc/self/task"); }

// Resident set size in KiB.
long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// One exchange each way, so every cycle really connects.
void ping(ProcessGroup& pg) {
  int peer = 1 - pg.rank();
  int32_t out = pg.rank(), in = -1;
  auto r = pg.irecv(Tensor::of(&in, 1), peer);
  pg.send(Tensor::of(&out, 1), peer);
  r->wait();
  ASSERT_EQ(in, peer);
}

class Resources : public ::testing::TestWithParam<std::string> {};

TEST_P(Resources, WorldCreateDestroyCyclesLeakNothing) {
  std::string backend = GetParam();
  auto res = run_ranks(2, [backend](RankContext& c) {
    InitOptions o;
    o.backend = backend;
    o.timeout = std::chrono::seconds(60);
    int fds = -1, thr = -1, shm = -1;
    const int kCycles = 120;
    for (int i = 0; i < kCycles; ++i) {
      auto pg = ProcessGroup::create(c.store, c.rank, c.world_size, o);
      ping(*pg);
      pg->destroy();
      pg.reset();
      if (i == 1) {  // after the first cycles: lazily made singletons exist by now
        fds = open_fds();
        thr = threads();
        shm = count_entries("/dev/shm", "tpcomm");
      }
    }
    EXPECT_LE(open_fds(), fds) << "file descriptors leaked over " << kCycles << " cycles";
    EXPECT_LE(threads(), thr) << "threads leaked";
    EXPECT_LE(count_entries("/dev/shm", "tpcomm"), shm) << "shared-memory segments leaked";
  });
  EXPECT_RANKS_OK(res);
}

TEST_P(Resources, SubgroupCreateDestroyCyclesLeakNothing) {
  std::string backend = GetParam();
  auto res = run_ranks(2, [backend](RankContext& c) {
    InitOptions o;
    o.backend = backend;
    o.timeout = std::chrono::seconds(60);
    auto world = ProcessGroup::create(c.store, c.rank, c.world_size, o);
    ping(*world);
    int fds = -1, thr = -1;
    long rss = -1;
    const int kCycles = 1000;
    for (int i = 0; i < kCycles; ++i) {
      auto g = world->new_group({0, 1});
      if (i % 50 == 0) ping(*g);
      g->destroy();
      if (i == 10) {
        fds = open_fds();
        thr = threads();
        rss = rss_kib();
      }
    }
    EXPECT_LE(open_fds(), fds) << "file descriptors leaked over " << kCycles << " subgroups";
    EXPECT_LE(threads(), thr) << "threads leaked";
    // Each group costs a few hundred bytes of bookkeeping at most.
    EXPECT_LT(rss_kib() - rss, 16 * 1024) << "memory grew by more than 16 MiB";
    world->destroy();
  });
  EXPECT_RANKS_OK(res);
}

INSTANTIATE_TEST_SUITE_P(Backends, Resources, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return info.param; });

// A process group dropped without destroy() while one of its receives is still pending (its
// Work dropped too): the pending operation does not keep the group alive (no cycle through
// the engine), so the engine shuts down at once and its progress thread goes, and a message
// arriving afterwards crashes nothing.
TEST(Resources, DroppedGroupWithAPendingReceiveIsReleased) {
  auto res = run_ranks(2, [](RankContext& c) {
    InitOptions o;
    o.backend = "shm";
    o.timeout = std::chrono::seconds(30);
    if (c.rank == 1) {
      int before = threads();
      int32_t in = -1;
      {
        auto pg = ProcessGroup::create(c.store, c.rank, c.world_size, o);
        ping(*pg);
        pg->irecv(Tensor::of(&in, 1), 0, 5);  // Work dropped at once; never matched here
      }
      // Everything of the group is gone: the engine's threads were joined.
      EXPECT_LE(threads(), before) << "the dropped group's threads are still running";
      c.store->set("dropped", "1");
      c.store->get("sent");
      EXPECT_EQ(in, -1);  // the aborted receive never wrote into the buffer
    } else {
      auto pg = ProcessGroup::create(c.store, c.rank, c.world_size, o);
      ping(*pg);
      c.store->get("dropped");
      int32_t out = 42;
      try {
        pg->send(Tensor::of(&out, 1), 1, 5);  // the peer's engine is gone: may fail, must not hang
      } catch (const Error&) {
      }
      c.store->set("sent", "1");
      pg->destroy();
    }
  });
  EXPECT_RANKS_OK(res);
}

TEST(Resources, TenThousandOutstandingIsendsStayBounded) {
  auto res = run_ranks(2, [](RankContext& c) {
    InitOptions o;
    o.backend = "tcp";
    o.timeout = std::chrono::seconds(90);
    auto pg = ProcessGroup::create(c.store, c.rank, c.world_size, o);
    ping(*pg);
    const int kSends = 10000;
    const size_t kBytes = 1024;
    // One buffer shared by every send: the sender must not copy payloads it cannot send yet.
    std::vector<uint8_t> buf(kBytes, 0x5a);
    long before = rss_kib();
    if (c.rank == 0) {
      std::vector<std::shared_ptr<Work>> works;
      works.reserve(kSends);
      for (int i = 0; i < kSends; ++i) works.push_back(pg->isend(Tensor::of(buf), 1, i % 7));
      long grown = rss_kib() - before;
      EXPECT_LT(grown, 64 * 1024) << "the sender grew by " << grown << " KiB for " << kSends
                                  << " outstanding 1 KiB sends";
      c.store->set("posted", "1");
      for (auto& w : works) w->wait();
    } else {
      c.store->get("posted");  // the sender has posted everything before anything is received
      std::vector<uint8_t> in(kBytes);
      for (int i = 0; i < kSends; ++i) {
        pg->recv(Tensor::of(in), 0, i % 7);
        ASSERT_EQ(in[kBytes - 1], 0x5a);
      }
      long grown = rss_kib() - before;
      EXPECT_LT(grown, 128 * 1024) << "the receiver grew by " << grown << " KiB";
    }
    ping(*pg);
    pg->destroy();
  });
  EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace tpcomm::testing
