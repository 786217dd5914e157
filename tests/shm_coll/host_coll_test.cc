// HostColl (shm_direct) on forked ranks: every operation x dtype x op x size (0, 1, 7, not
// divisible by the group, larger than the staging region), in and out of place, with 1, 2,
// 3, 4, 5 and 8 ranks (8 oversubscribes this machine); timeouts naming the missing rank;
// all-or-nothing creation; TPCOMM_ALGO; no shared-memory leftovers.
#include "collectives/shm/host_coll.h"

#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "collectives/select.h"
#include "common/multiproc.h"
#include "shm_coll/shm_coll_helper.h"
#include "tpcomm/error.hpp"

namespace tpcomm::coll::shm {
namespace {

using namespace std::chrono_literals;
using shm_test::check_reduced;
using shm_test::make_input;

constexpr double kPremul = 0.5;

// Small staging so that modest sizes take every path: small slot (<= 8 KiB), one staging
// half (16 KiB), and chunks of 8 KiB.
testing::RunOptions opts() {
  testing::RunOptions o;
  o.timeout = 90s;
  o.env = {{"TPCOMM_SHM_COLL_BYTES", "32K"}, {"TPCOMM_SHM_COLL_CHUNK", "8K"}, {"TPCOMM_ALGO", ""}};
  return o;
}

Deadline dl() { return Deadline::after(60s); }

std::unique_ptr<HostColl> make(testing::RankContext& c) {
  return HostColl::create(*c.store, c.rank, c.world_size, dl());
}

std::vector<size_t> counts(int n) {
  return {0, 1, 7, static_cast<size_t>(13 * n + 1), 3000, 20011};
}

std::string ctx(const char* op, DType dt, ReduceOp rop, size_t count, bool in_place, int rank) {
  return std::string(op) + " " + dtype_name(dt) + " " + reduce_op_name(rop) + " count " +
         std::to_string(count) + (in_place ? " in place" : " out of place") + " rank " +
         std::to_string(rank);
}

class HostCollRanks : public ::testing::TestWithParam<int> {};

TEST_P(HostCollRanks, AllReduceEveryDtypeOpSize) {
  const int n = GetParam();
  auto r = testing::run_ranks(
      n,
      [&](testing::RankContext& c) {
        auto hc = make(c);
        for (DType dt : shm_test::dtypes()) {
          const size_t es = dtype_size(dt);
          for (ReduceOp op : shm_test::ops_for(dt)) {
            for (size_t count : counts(n)) {
              for (bool in_place : {false, true}) {
                std::vector<uint8_t> in = make_input(dt, op, c.rank, count);
                std::vector<uint8_t> out(count * es + 1, 0xab);
                AllReduceArgs a;
                a.input = Tensor::raw(in.data(), static_cast<int64_t>(count), dt);
                a.output = in_place ? a.input : Tensor::raw(out.data(), a.input.numel, dt);
                a.op = op;
                a.premul_scale = kPremul;
                ASSERT_TRUE(hc->all_reduce(a, dl()));
                ASSERT_STREQ(hc->last_algo().name, "shm_direct");
                const void* got = in_place ? in.data() : out.data();
                std::string err = check_reduced(dt, op, kPremul, n, got, 0, count);
                ASSERT_EQ(err, "") << ctx("all_reduce", dt, op, count, in_place, c.rank);
                if (!in_place) {
                  ASSERT_EQ(make_input(dt, op, c.rank, count), in) << "input modified";
                }
              }
            }
          }
        }
      },
      opts());
  EXPECT_RANKS_OK(r);
}

TEST_P(HostCollRanks, ReduceScatterAndReduce) {
  const int n = GetParam();
  auto r = testing::run_ranks(
      n,
      [&](testing::RankContext& c) {
        auto hc = make(c);
        for (DType dt : shm_test::dtypes()) {
          const size_t es = dtype_size(dt);
          for (ReduceOp op : shm_test::ops_for(dt)) {
            for (size_t m : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}, size_t{3001}}) {
              for (bool in_place : {false, true}) {
                const size_t total = m * static_cast<size_t>(n);
                std::vector<uint8_t> in = make_input(dt, op, c.rank, total);
                std::vector<uint8_t> out(m * es + 1, 0xab);
                ReduceScatterArgs a;
                a.input = Tensor::raw(in.data(), static_cast<int64_t>(total), dt);
                void* o = in_place ? in.data() + c.rank * m * es : out.data();
                a.output = Tensor::raw(o, static_cast<int64_t>(m), dt);
                a.op = op;
                a.premul_scale = kPremul;
                ASSERT_TRUE(hc->reduce_scatter(a, dl()));
                std::string err = check_reduced(dt, op, kPremul, n, o, c.rank * m, m);
                ASSERT_EQ(err, "") << ctx("reduce_scatter", dt, op, m, in_place, c.rank);
              }
            }
            for (size_t count :
                 {size_t{0}, size_t{7}, static_cast<size_t>(13 * n + 1), size_t{20011}}) {
              const int root = static_cast<int>(count % static_cast<size_t>(n));
              std::vector<uint8_t> in = make_input(dt, op, c.rank, count);
              std::vector<uint8_t> out(count * es + 1, 0xab);
              ReduceArgs a;
              a.input = Tensor::raw(in.data(), static_cast<int64_t>(count), dt);
              a.output = Tensor::raw(out.data(), a.input.numel, dt);
              a.root = root;
              a.op = op;
              a.premul_scale = kPremul;
              ASSERT_TRUE(hc->reduce(a, dl()));
              if (c.rank == root) {
                std::string err = check_reduced(dt, op, kPremul, n, out.data(), 0, count);
                ASSERT_EQ(err, "") << ctx("reduce", dt, op, count, false, c.rank);
              } else {
                ASSERT_EQ(std::vector<uint8_t>(count * es + 1, 0xab), out) << "non-root output";
              }
              ASSERT_EQ(make_input(dt, op, c.rank, count), in) << "reduce modified its input";
            }
          }
        }
      },
      opts());
  EXPECT_RANKS_OK(r);
}

std::vector<uint8_t> pattern(int rank, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(rank * 31 + i * 7 + (i >> 9));
  return v;
}

TEST_P(HostCollRanks, BroadcastAllGatherBarrier) {
  const int n = GetParam();
  auto r = testing::run_ranks(
      n,
      [&](testing::RankContext& c) {
        auto hc = make(c);
        for (size_t bytes :
             {size_t{0}, size_t{1}, size_t{7}, size_t{8192}, size_t{40001}, size_t{100003}}) {
          for (int root = 0; root < n; root += (n > 3 ? 3 : 1)) {
            for (bool in_place : {true, false}) {
              std::vector<uint8_t> data(bytes, 0x5a), src = pattern(root, bytes);
              if (in_place && c.rank == root) data = src;
              BroadcastArgs a;
              a.tensor = Tensor::raw(data.data(), static_cast<int64_t>(bytes), DType::UInt8);
              if (!in_place && c.rank == root) {
                a.input = Tensor::raw(src.data(), static_cast<int64_t>(bytes), DType::UInt8);
              }
              a.root = root;
              ASSERT_TRUE(hc->broadcast(a, dl()));
              ASSERT_EQ(data, pattern(root, bytes))
                  << "broadcast " << bytes << " bytes from " << root << " rank " << c.rank;
            }
          }
        }
        for (size_t m : {size_t{0}, size_t{1}, size_t{7}, size_t{3001}, size_t{40000}}) {
          for (bool in_place : {false, true}) {
            std::vector<uint8_t> in = pattern(c.rank, m);
            std::vector<uint8_t> out(m * static_cast<size_t>(n), 0x11);
            if (in_place && m > 0) std::memcpy(out.data() + c.rank * m, in.data(), m);
            AllGatherArgs a;
            a.input = Tensor::raw(in_place ? out.data() + c.rank * m : in.data(),
                                  static_cast<int64_t>(m), DType::UInt8);
            a.output = Tensor::raw(out.data(), static_cast<int64_t>(m) * n, DType::UInt8);
            ASSERT_TRUE(hc->all_gather(a, dl()));
            for (int q = 0; q < n && m > 0; ++q) {  // (memcmp of empty vectors: null)
              ASSERT_EQ(0, std::memcmp(out.data() + q * m, pattern(q, m).data(), m))
                  << "all_gather block " << q << " of " << m << " bytes on rank " << c.rank;
            }
          }
        }
        for (int i = 0; i < 50; ++i) ASSERT_TRUE(hc->barrier(dl()));
        // Identical bits on every rank for a float sum whose order matters (small, direct
        // and chunked paths): gather everyone's result and compare.
        for (size_t count : {size_t{100}, size_t{3000}, size_t{20011}}) {
          std::mt19937 gen(static_cast<unsigned>(c.rank * 977 + count));
          std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
          std::vector<float> x(count);
          for (float& f : x) f = dist(gen) * 1e3f;
          AllReduceArgs a;
          a.input = a.output = Tensor::of(x);
          ASSERT_TRUE(hc->all_reduce(a, dl()));
          std::vector<float> all(count * static_cast<size_t>(n));
          AllGatherArgs g;
          g.input = Tensor::of(x);
          g.output = Tensor::of(all);
          ASSERT_TRUE(hc->all_gather(g, dl()));
          for (int q = 1; q < n; ++q) {
            ASSERT_EQ(0, std::memcmp(all.data(), all.data() + q * count, count * 4))
                << "rank " << q << " got different bits than rank 0 (count " << count << ")";
          }
        }
      },
      opts());
  EXPECT_RANKS_OK(r);
}

// Back-to-back small broadcasts from one root while the readers lag (a sleep now and then):
// the root runs ahead through the kSmallSlots small slots, reusing each only once every
// reader has moved past it; every reader gets every call's bytes, in order, and a barrier or
// all_reduce between them (other users of the small slots) stays consistent.
TEST_P(HostCollRanks, SmallBroadcastsRunAheadOfLateReaders) {
  const int n = GetParam();
  auto r = testing::run_ranks(
      n,
      [&](testing::RankContext& c) {
        auto hc = make(c);
        const int root = n - 1;
        for (int i = 0; i < 200; ++i) {
          if (c.rank != root && i % 23 == c.rank % 23)
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          const size_t bytes = 1 + static_cast<size_t>(i * 37) % 3000;
          std::vector<uint8_t> data = c.rank == root ? pattern(i, bytes)
                                                     : std::vector<uint8_t>(bytes, 0);
          BroadcastArgs a;
          a.tensor = Tensor::raw(data.data(), static_cast<int64_t>(bytes), DType::UInt8);
          a.root = root;
          ASSERT_TRUE(hc->broadcast(a, dl()));
          ASSERT_EQ(data, pattern(i, bytes)) << "call " << i << " on rank " << c.rank;
          if (i % 50 == 49) {
            int32_t v = c.rank + i;
            AllReduceArgs s;
            s.input = s.output = Tensor::of(&v, 1);
            ASSERT_TRUE(hc->all_reduce(s, dl()));
            ASSERT_EQ(v, n * (n - 1) / 2 + n * i);
          }
        }
      },
      opts());
  EXPECT_RANKS_OK(r);
}

INSTANTIATE_TEST_SUITE_P(Ranks, HostCollRanks, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// The 2-rank all_reduce whose chunk periods run in one vector loop (streamed results, SUM of
// float32/float64/int32/int64): chunks of 64 KiB, results streamed from 4 KiB, sizes of
// several chunks with odd tails and outputs one element off the vector alignment, on
// AVX-512 and AVX2; the other dtypes and ops take the unfused path in the same setting.
TEST(HostColl, TwoRankFusedAllReduceEveryAlignmentAndIsa) {
  // Each ISA with cached and streaming staging stores, and auto (both, as it learns).
  const std::pair<const char*, const char*> runs[] = {
      {"auto", "cached"}, {"auto", "streaming"}, {"avx2", "streaming"}, {"avx2", "auto"}};
  for (const auto& run : runs) {
    // (Plain names, not a structured binding: clang before 16 cannot capture one.)
    const char* isa = run.first;
    const char* stores = run.second;
    testing::RunOptions o = opts();
    o.env = {{"TPCOMM_SHM_COLL_BYTES", "192K"},
             {"TPCOMM_SHM_COLL_CHUNK", "64K"},
             {"TPCOMM_REDUCE_NT_THRESHOLD", "4K"},
             {"TPCOMM_REDUCE_ISA", isa},
             {"TPCOMM_SHM_COLL_STAGE_STORES", stores},
             {"TPCOMM_ALGO", ""}};
    auto r = testing::run_ranks(
        2,
        [&](testing::RankContext& c) {
          auto hc = make(c);
          for (DType dt : shm_test::dtypes()) {
            const size_t es = dtype_size(dt);
            for (ReduceOp op : shm_test::ops_for(dt)) {
              const bool fused_op = op == ReduceOp::SUM;
              for (size_t count : {size_t{20011}, size_t{100003}, size_t{131072}}) {
                if (!fused_op && count != 100003) continue;
                for (size_t shift : {size_t{0}, es}) {
                  for (bool in_place : {false, true}) {
                    const std::string where = ctx("all_reduce", dt, op, count, in_place, c.rank) +
                                              " isa " + isa + " stores " + stores + " shift " +
                                              std::to_string(shift);
                    // One buffer holds the input (in place) or the output, `shift` bytes past
                    // a 64-byte boundary, with guard bytes on both sides.
                    std::vector<uint8_t> in = make_input(dt, op, c.rank, count);
                    std::vector<uint8_t> buf(count * es + 256, 0xab);
                    auto* base = reinterpret_cast<uint8_t*>(
                        (reinterpret_cast<uintptr_t>(buf.data()) + 63) / 64 * 64 + 64 + shift);
                    AllReduceArgs a;
                    if (in_place) {
                      std::memcpy(base, in.data(), count * es);
                      a.input = Tensor::raw(base, static_cast<int64_t>(count), dt);
                    } else {
                      a.input = Tensor::raw(in.data(), static_cast<int64_t>(count), dt);
                    }
                    a.output = in_place ? a.input : Tensor::raw(base, a.input.numel, dt);
                    a.op = op;
                    a.premul_scale = kPremul;
                    ASSERT_TRUE(hc->all_reduce(a, dl()));
                    ASSERT_EQ(check_reduced(dt, op, kPremul, 2, base, 0, count), "") << where;
                    ASSERT_EQ(base[-1], 0xab) << where;
                    ASSERT_EQ(base[count * es], 0xab) << where;
                    if (!in_place) {
                      ASSERT_EQ(make_input(dt, op, c.rank, count), in) << "input modified";
                    }
                  }
                }
              }
            }
          }
        },
        o);
    EXPECT_RANKS_OK(r);
  }
}

// Large broadcasts and all_gathers through the staging buffers (single-copy reads off),
// results streamed from 4 KiB, so that the staging chunks go in with cached, streaming or
// (auto) both kinds of stores: sizes of several 64 KiB chunks with odd tails, blocks and
// outputs off the vector alignment, every root, in place and out of place, on AVX-512 and
// AVX2.
TEST(HostColl, StagedBroadcastAndAllGatherWithEveryKindOfStagingStores) {
  const std::pair<const char*, const char*> runs[] = {
      {"auto", "cached"}, {"auto", "streaming"}, {"auto", "auto"}, {"avx2", "streaming"}};
  for (const auto& run : runs) {
    // (Plain names, not a structured binding: clang before 16 cannot capture one.)
    const char* isa = run.first;
    const char* stores = run.second;
    testing::RunOptions o = opts();
    o.env = {{"TPCOMM_SHM_COLL_BYTES", "192K"},      {"TPCOMM_SHM_COLL_CHUNK", "64K"},
             {"TPCOMM_REDUCE_NT_THRESHOLD", "4K"},   {"TPCOMM_REDUCE_ISA", isa},
             {"TPCOMM_SHM_COLL_STAGE_STORES", stores}, {"TPCOMM_SHM_COLL_CMA", "off"},
             {"TPCOMM_ALGO", ""}};
    for (int n : {2, 3}) {
      auto r = testing::run_ranks(
          n,
          [&](testing::RankContext& c) {
            auto hc = make(c);
            const std::string how = std::string(" isa ") + isa + " stores " + stores;
            for (size_t bytes : {size_t{100003}, size_t{65536 * 5}, size_t{65536 * 7 + 33}}) {
              for (int root = 0; root < n; ++root) {
                for (bool in_place : {true, false}) {
                  std::vector<uint8_t> data(bytes + 1, 0x5a), src = pattern(root, bytes + 1);
                  uint8_t* at = data.data() + (bytes & 1);  // odd sizes start off alignment
                  const uint8_t* from = src.data() + (bytes & 1);
                  if (in_place && c.rank == root) std::memcpy(at, from, bytes);
                  BroadcastArgs a;
                  a.tensor = Tensor::raw(at, static_cast<int64_t>(bytes), DType::UInt8);
                  if (!in_place && c.rank == root) {
                    a.input = Tensor::raw(const_cast<uint8_t*>(from), static_cast<int64_t>(bytes),
                                          DType::UInt8);
                  }
                  a.root = root;
                  ASSERT_TRUE(hc->broadcast(a, dl()));
                  ASSERT_EQ(0, std::memcmp(at, from, bytes))
                      << "broadcast " << bytes << " bytes from " << root << " rank " << c.rank
                      << how;
                }
              }
            }
            // Blocks of whole 64 KiB chunks at a 64-byte boundary (the fused steps stream
            // their staging), then one byte off it (they cannot: cached), and odd sizes.
            for (size_t m : {size_t{65536 * 3}, size_t{65536 * 4 + 128}, size_t{40001},
                             size_t{65536 * 4 + 100}}) {
              for (size_t shift : {size_t{0}, size_t{1}}) {
                for (bool in_place : {false, true}) {
                  std::vector<uint8_t> in_buf(m + 128), out_buf(m * n + 128, 0x11);
                  auto align = [&](std::vector<uint8_t>& v) {
                    return reinterpret_cast<uint8_t*>(
                               (reinterpret_cast<uintptr_t>(v.data()) + 63) / 64 * 64) +
                           shift;
                  };
                  uint8_t* out = align(out_buf);
                  uint8_t* in = in_place ? out + c.rank * m : align(in_buf);
                  std::memcpy(in, pattern(c.rank, m).data(), m);
                  AllGatherArgs a;
                  a.input = Tensor::raw(in, static_cast<int64_t>(m), DType::UInt8);
                  a.output = Tensor::raw(out, static_cast<int64_t>(m) * n, DType::UInt8);
                  ASSERT_TRUE(hc->all_gather(a, dl()));
                  for (int q = 0; q < n; ++q) {
                    ASSERT_EQ(0, std::memcmp(out + q * m, pattern(q, m).data(), m))
                        << "all_gather block " << q << " of " << m << " bytes, shift " << shift
                        << (in_place ? ", in place" : "") << ", on rank " << c.rank << how;
                  }
                  if (shift == 0 && m % 64 == 0) {
                    // Nothing outside the output was written.
                    ASSERT_EQ(out[m * n], 0x11) << how;
                  }
                }
              }
            }
          },
          o);
      EXPECT_RANKS_OK(r);
    }
  }
}

TEST(HostColl, MissingRankTimesOutNamingIt) {
  auto r = testing::run_ranks(
      3,
      [](testing::RankContext& c) {
        auto a = make(c);
        auto b = make(c);
        if (c.rank == 2) return;  // never arrives
        std::vector<float> x(4, 1.0f);
        AllReduceArgs ar;
        ar.input = ar.output = Tensor::of(x);
        try {
          a->all_reduce(ar, Deadline::after(300ms));
          ADD_FAILURE() << "all_reduce returned without rank 2";
        } catch (const TimeoutError& e) {
          std::string m = e.what();
          EXPECT_NE(m.find("all_reduce"), std::string::npos) << m;
          EXPECT_NE(m.find("rank 2"), std::string::npos) << m;
        }
        try {
          a->barrier(dl());
          ADD_FAILURE() << "barrier on a broken instance returned";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("unusable"), std::string::npos) << e.what();
        }
        std::vector<uint8_t> big(100000);
        BroadcastArgs br;
        br.tensor = Tensor::of(big);
        br.root = 2;
        try {
          b->broadcast(br, Deadline::after(300ms));
          ADD_FAILURE() << "broadcast returned without its root";
        } catch (const TimeoutError& e) {
          std::string m = e.what();
          EXPECT_NE(m.find("broadcast"), std::string::npos) << m;
          EXPECT_NE(m.find("rank 2"), std::string::npos) << m;
        }
      },
      opts());
  EXPECT_RANKS_OK(r);
}

TEST(HostColl, MismatchedStagingSizeFailsOnEveryRank) {
  auto o = opts();
  o.rank_env = [](int rank) {
    std::map<std::string, std::string> e;
    if (rank == 1) e["TPCOMM_SHM_COLL_BYTES"] = "64K";
    return e;
  };
  auto r = testing::run_ranks(
      3,
      [](testing::RankContext& c) {
        try {
          make(c);
          ADD_FAILURE() << "create succeeded with mismatched TPCOMM_SHM_COLL_BYTES";
        } catch (const TransportError& e) {
          EXPECT_NE(std::string(e.what()).find("TPCOMM_SHM_COLL_BYTES"), std::string::npos)
              << e.what();
        }
      },
      o);
  EXPECT_RANKS_OK(r);
}

TEST(HostColl, BadRankIsInvalidArgument) {
  HashStore store;
  try {
    HostColl::create(store, 3, 2, Deadline::after(1s));
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 3"), std::string::npos) << e.what();
  }
}

TEST(HostColl, AlgoSelectionHonoursTpcommAlgo) {
  auto o = opts();
  o.env["TPCOMM_ALGO"] =
      "allreduce:ring;broadcast:shm_direct;allgather:0-100:shm_direct;allgather:ring";
  auto r = testing::run_ranks(
      2,
      [](testing::RankContext& c) {
        auto hc = make(c);
        std::vector<float> x(64, 1.0f);
        AllReduceArgs ar;
        ar.input = ar.output = Tensor::of(x);
        EXPECT_FALSE(hc->all_reduce(ar, dl())) << "allreduce:ring must leave it to the ring";
        EXPECT_EQ(x[0], 1.0f);
        ar.options.algorithm = "shm_direct";
        EXPECT_TRUE(hc->all_reduce(ar, dl()));
        EXPECT_EQ(x[0], 2.0f);
        EXPECT_STREQ(hc->last_algo().name, "shm_direct");
        BroadcastArgs br;
        br.tensor = Tensor::of(x);
        EXPECT_TRUE(hc->broadcast(br, dl()));
        std::vector<float> out(128);
        AllGatherArgs ag;
        ag.input = Tensor::of(x);
        ag.output = Tensor::of(out);
        EXPECT_FALSE(hc->all_gather(ag, dl()))
            << "512 bytes is outside allgather:0-100, so allgather:ring";
      },
      o);
  EXPECT_RANKS_OK(r);
}

TEST(HostColl, ForcedShmFallsBackInTheMessagePassingSelection) {
  EXPECT_NO_THROW(parse_algo_rules("allreduce:shm_direct;barrier:shm_direct"));
  EXPECT_THROW(parse_algo_rules("alltoall:shm_direct"), ConfigError);
  CommonOptions o;
  o.algorithm = "shm_direct";
  const AlgoInfo& a = select_algorithm(CollOp::AllReduce, 1 << 20, 4, TransportHints{}, o, 1 << 19);
  EXPECT_STRNE(a.name, "shm_direct");
}

std::set<std::string> dev_shm_entries() {
  std::set<std::string> s;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) s.insert(e->d_name);
    closedir(d);
  }
  return s;
}

bool maps_contain(const std::string& what) {
  std::ifstream f("/proc/self/maps");
  std::string line;
  while (std::getline(f, line)) {
    if (line.find(what) != std::string::npos) return true;
  }
  return false;
}

TEST(HostColl, NoLeftoversAfterDestroy) {
  std::set<std::string> before = dev_shm_entries();
  auto r = testing::run_ranks(
      4,
      [](testing::RankContext& c) {
        {
          auto hc = make(c);
          EXPECT_TRUE(maps_contain("tpcomm-shm-coll"));
          std::vector<int32_t> x(5000, c.rank);
          AllReduceArgs a;
          a.input = a.output = Tensor::of(x);
          ASSERT_TRUE(hc->all_reduce(a, dl()));
          EXPECT_EQ(x[4999], 6);
        }
        EXPECT_FALSE(maps_contain("tpcomm-shm-coll")) << "segments still mapped after destroy";
      },
      opts());
  EXPECT_RANKS_OK(r);
  for (const std::string& e : dev_shm_entries()) {
    if (before.count(e)) continue;
    EXPECT_EQ(e.find("tpcomm"), std::string::npos) << "left in /dev/shm: " << e;
  }
}

}  // namespace
}  // namespace tpcomm::coll::shm
