// shm_direct's single-copy broadcast and all_gather (process_vm_readv straight from the
// owner's tensor, TPCOMM_SHM_COLL_CMA): sizes around TPCOMM_SHM_COLL_CMA_MIN, odd sizes, every
// root, in and out of place, 1 to 8 ranks; the owner's input is never modified and may be
// reused at once after the call; a rank whose process_vm_readv is refused by a seccomp filter
// (as in containers' default profile) keeps the whole group on the staging copies, with the
// reason; a refusal after creation fails the call on that rank only, naming the peer, and the
// group goes on; ranks disagreeing on the settings still agree on the path.
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/shm/host_coll.h"
#include "common/multiproc.h"
#include "tpcomm/error.hpp"

namespace tpcomm::coll::shm {
namespace {

using namespace std::chrono_literals;

constexpr size_t kMin = 64 << 10;  // TPCOMM_SHM_COLL_CMA_MIN of these tests

testing::RunOptions opts(const char* mode = "auto") {
  testing::RunOptions o;
  o.timeout = 90s;
  o.env = {{"TPCOMM_SHM_COLL_BYTES", "96K"},
           {"TPCOMM_SHM_COLL_CHUNK", "16K"},
           {"TPCOMM_SHM_COLL_CMA", mode},
           {"TPCOMM_SHM_COLL_CMA_MIN", "64K"},
           {"TPCOMM_ALGO", ""}};
  return o;
}

Deadline dl() { return Deadline::after(60s); }

std::unique_ptr<HostColl> make(testing::RankContext& c) {
  return HostColl::create(*c.store, c.rank, c.world_size, dl());
}

std::vector<uint8_t> pattern(int rank, size_t bytes, int salt = 0) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    v[i] = static_cast<uint8_t>(rank * 31 + salt * 17 + i * 7 + (i >> 11));
  }
  return v;
}

// Makes this thread's process_vm_readv fail with EPERM, as a container's seccomp profile does.
void refuse_cross_reads() {
  sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof f / sizeof f[0]), f};
  ASSERT_EQ(0, ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) << std::strerror(errno);
  ASSERT_EQ(0, ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) << std::strerror(errno);
}

// Broadcasts from every root (in and out of place) and all_gathers (in and out of place) of
// each size; `salt` varies the data between rounds. The root's and the owners' inputs are
// overwritten right after each call: a peer still reading would see it.
void run_ops(testing::RankContext& c, HostColl& hc, const std::vector<size_t>& sizes, int salt) {
  const int n = c.world_size;
  for (size_t bytes : sizes) {
    for (int root = 0; root < n; root += (n > 4 ? 3 : 1)) {
      for (bool in_place : {false, true}) {
        const std::vector<uint8_t> want = pattern(root, bytes, salt);
        std::vector<uint8_t> data(bytes, 0x5a), src = want;
        if (in_place && c.rank == root) data = want;
        BroadcastArgs a;
        a.tensor = Tensor::raw(data.data(), static_cast<int64_t>(bytes), DType::UInt8);
        if (!in_place && c.rank == root) {
          a.input = Tensor::raw(src.data(), static_cast<int64_t>(bytes), DType::UInt8);
        }
        a.root = root;
        ASSERT_TRUE(hc.broadcast(a, dl()));
        ASSERT_EQ(data, want) << "broadcast " << bytes << " bytes from " << root
                              << (in_place ? " in place" : " out of place") << " on rank "
                              << c.rank;
        if (c.rank == root) {
          ASSERT_EQ(src, want) << "broadcast modified the root's input";
        }
        std::memset(data.data(), 0xee, bytes);  // reused at once
        std::memset(src.data(), 0xee, bytes);
      }
    }
    const size_t m = bytes;
    for (bool in_place : {false, true}) {
      std::vector<uint8_t> in = pattern(c.rank, m, salt);
      std::vector<uint8_t> out(m * static_cast<size_t>(n), 0x11);
      if (in_place) std::memcpy(out.data() + c.rank * m, in.data(), m);
      AllGatherArgs g;
      g.input = Tensor::raw(in_place ? out.data() + c.rank * m : in.data(), static_cast<int64_t>(m),
                            DType::UInt8);
      g.output = Tensor::raw(out.data(), static_cast<int64_t>(m) * n, DType::UInt8);
      ASSERT_TRUE(hc.all_gather(g, dl()));
      for (int q = 0; q < n; ++q) {
        ASSERT_EQ(0, std::memcmp(out.data() + q * m, pattern(q, m, salt).data(), m))
            << "all_gather block " << q << " of " << m << " bytes"
            << (in_place ? " in place" : " out of place") << " on rank " << c.rank;
      }
      if (!in_place) {
        ASSERT_EQ(in, pattern(c.rank, m, salt)) << "all_gather modified its input";
      }
      std::memset(in.data(), 0xee, m);
      std::memset(out.data(), 0xee, out.size());
    }
  }
}

// Around the threshold, odd, and a few chunks long.
const std::vector<size_t> kSizes = {kMin - 1, kMin, kMin + 1, 100003, 3 * kMin + 17};

class SingleCopyRanks : public ::testing::TestWithParam<int> {};

TEST_P(SingleCopyRanks, BroadcastAndAllGatherEverySize) {
  for (const char* mode : {"auto", "on"}) {
    auto r = testing::run_ranks(
        GetParam(),
        [&](testing::RankContext& c) {
          auto hc = make(c);
          if (c.world_size > 1) {
            EXPECT_TRUE(hc->single_copy()) << hc->single_copy_note();
          }
          for (int salt = 0; salt < 2; ++salt) run_ops(c, *hc, kSizes, salt);
          // Small collectives between large ones keep their phases.
          std::vector<float> x(300, 1.0f);
          AllReduceArgs ar;
          ar.input = ar.output = Tensor::of(x);
          ASSERT_TRUE(hc->all_reduce(ar, dl()));
          ASSERT_EQ(x[299], static_cast<float>(c.world_size));
        },
        opts(mode));
    EXPECT_RANKS_OK(r) << "TPCOMM_SHM_COLL_CMA=" << mode;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, SingleCopyRanks, ::testing::Values(1, 2, 3, 5, 8),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

TEST(SingleCopy, RefusedReadsKeepTheGroupOnStaging) {
  auto r = testing::run_ranks(
      3,
      [](testing::RankContext& c) {
        if (c.rank == 1) refuse_cross_reads();
        auto hc = make(c);
        EXPECT_FALSE(hc->single_copy());
        const std::string& why = hc->single_copy_note();
        EXPECT_NE(why.find("rank 1 cannot read"), std::string::npos) << why;
        EXPECT_NE(why.find("process_vm_readv"), std::string::npos) << why;
        EXPECT_NE(why.find("seccomp"), std::string::npos) << why;
        run_ops(c, *hc, {kMin, 3 * kMin + 17}, 0);
      },
      opts("on"));
  EXPECT_RANKS_OK(r);
}

TEST(SingleCopy, OffOnOneRankKeepsTheGroupOnStaging) {
  auto o = opts("auto");
  o.rank_env = [](int rank) {
    std::map<std::string, std::string> e;
    if (rank == 0) e["TPCOMM_SHM_COLL_CMA"] = "off";
    if (rank == 1) e["TPCOMM_SHM_COLL_CMA_MIN"] = "1M";  // the group's largest is used
    return e;
  };
  auto r = testing::run_ranks(
      2,
      [](testing::RankContext& c) {
        auto hc = make(c);
        EXPECT_FALSE(hc->single_copy());
        EXPECT_NE(hc->single_copy_note().find("TPCOMM_SHM_COLL_CMA=off on rank 0"),
                  std::string::npos)
            << hc->single_copy_note();
        run_ops(c, *hc, {kMin + 1}, 0);
      },
      o);
  EXPECT_RANKS_OK(r);
}

TEST(SingleCopy, DifferentThresholdsAgree) {
  auto o = opts("auto");
  o.rank_env = [](int rank) {
    std::map<std::string, std::string> e;
    if (rank == 2) e["TPCOMM_SHM_COLL_CMA_MIN"] = "100K";
    return e;
  };
  auto r = testing::run_ranks(
      3,
      [](testing::RankContext& c) {
        auto hc = make(c);
        EXPECT_TRUE(hc->single_copy()) << hc->single_copy_note();
        run_ops(c, *hc, {kMin + 1, 100 << 10, (100 << 10) + 1}, 1);
      },
      o);
  EXPECT_RANKS_OK(r);
}

// auto: the split broadcast from a root out of place; on: the direct all_gather.
TEST(SingleCopy, RefusalAfterCreationFailsThatCallOnly) {
  for (const char* mode : {"auto", "on"}) {
    auto r = testing::run_ranks(
        2,
        [&](testing::RankContext& c) {
          auto hc = make(c);
          ASSERT_TRUE(hc->single_copy()) << hc->single_copy_note();
          if (c.rank == 1) refuse_cross_reads();
          const size_t m = 2 * kMin;
          std::vector<uint8_t> in = pattern(c.rank, m), out(2 * m);
          auto call = [&] {
            if (std::string(mode) == "on") {
              AllGatherArgs g;
              g.input = Tensor::raw(in.data(), static_cast<int64_t>(m), DType::UInt8);
              g.output = Tensor::raw(out.data(), static_cast<int64_t>(2 * m), DType::UInt8);
              return hc->all_gather(g, dl());
            }
            BroadcastArgs b;
            b.tensor = Tensor::raw(out.data(), static_cast<int64_t>(m), DType::UInt8);
            if (c.rank == 0)
              b.input = Tensor::raw(in.data(), static_cast<int64_t>(m), DType::UInt8);
            return hc->broadcast(b, dl());
          };
          if (c.rank == 1) {
            try {
              call();
              ADD_FAILURE() << "returned although process_vm_readv is refused";
            } catch (const TransportError& e) {
              const std::string m = e.what();
              EXPECT_NE(m.find(std::string(mode) == "on" ? "from rank 0" : "from root 0"),
                        std::string::npos)
                  << m;
              EXPECT_NE(m.find("process_vm_readv"), std::string::npos) << m;
              EXPECT_NE(m.find("TPCOMM_SHM_COLL_CMA=off"), std::string::npos) << m;
            }
          } else {
            ASSERT_TRUE(call());  // rank 0's own part still works
            if (std::string(mode) == "on") {
              ASSERT_EQ(0, std::memcmp(out.data() + m, pattern(1, m).data(), m));
            } else {
              ASSERT_EQ(0, std::memcmp(out.data(), pattern(0, m).data(), m));
            }
          }
          // The phases still agree: the group goes on.
          for (int i = 0; i < 3; ++i) ASSERT_TRUE(hc->barrier(dl()));
          std::vector<int32_t> x(5000, c.rank + 1);
          AllReduceArgs ar;
          ar.input = ar.output = Tensor::of(x);
          ASSERT_TRUE(hc->all_reduce(ar, dl()));
          ASSERT_EQ(x[4999], 3);
        },
        opts(mode));
    EXPECT_RANKS_OK(r) << "TPCOMM_SHM_COLL_CMA=" << mode;
  }
}

}  // namespace
}  // namespace tpcomm::coll::shm
