// The tiniest all_reduce (a SUM of up to 16 bytes per rank, shm_direct's shared slots), which
// runs without the Reducer's calls (allreduce_shm_tiny): bit-identical results in rank order
// for every dtype it takes and each count around its limit, the other ops and dtypes of the
// same sizes still right, a mismatched tiny call still failing with MismatchError, a
// destroyed group still refusing calls, and ProcessGroup::all_reduce's fast lane for these
// calls in step with every other path, its timeouts reported as the general path's.
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "pg_coll/pg_coll_util.h"

namespace tpcomm::testing {
namespace {

using std::chrono::milliseconds;

// Rank r's element i: values whose float sums round (so that the order of the additions
// shows), integers near the top of their range (so that the sum wraps).
template <class T>
T tiny_val(int rank, size_t i) {
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(0.1) * static_cast<T>(rank + 1) + static_cast<T>(i) / static_cast<T>(3);
  else
    return static_cast<T>(std::numeric_limits<T>::max() - static_cast<T>(rank * 7 + i));
}

// The sum over `n` ranks in rank order, in the element type (integers wrap).
template <class T>
struct Acc {
  using type = std::make_unsigned_t<T>;
};
template <>
struct Acc<float> {
  using type = float;
};
template <>
struct Acc<double> {
  using type = double;
};

template <class T>
T tiny_sum(int n, size_t i) {
  using U = typename Acc<T>::type;
  U acc = static_cast<U>(tiny_val<T>(0, i));
  for (int r = 1; r < n; ++r) acc = static_cast<U>(acc + static_cast<U>(tiny_val<T>(r, i)));
  return static_cast<T>(acc);
}

template <class T>
void check_sums(ProcessGroup& pg, int rank, int n) {
  for (size_t count = 1; count <= 5; ++count) {
    std::vector<T> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = tiny_val<T>(rank, i);
    for (int rep = 0; rep < 3; ++rep) {  // both slots, and a repeated call
      std::vector<T> x = v;
      pg.all_reduce(Tensor::of(x), ReduceOp::SUM);
      for (size_t i = 0; i < count; ++i) {
        const T want = tiny_sum<T>(n, i);
        EXPECT_EQ(std::memcmp(&x[i], &want, sizeof(T)), 0)
            << dtype_name(DTypeOf<T>::value) << "[" << count << "] element " << i << ": got "
            << x[i] << ", want " << want;
      }
      EXPECT_EQ(last_algo(pg), "shm_direct");
    }
  }
}

class PgCollTiny : public ::testing::TestWithParam<int> {};

TEST_P(PgCollTiny, SumsAreExactInRankOrder) {
  const int n = GetParam();
  auto r = run_ranks(n, [&](RankContext& ctx) {
    auto pg = make_world(ctx, "shm", milliseconds(30000));
    check_sums<float>(*pg, ctx.rank, n);
    check_sums<double>(*pg, ctx.rank, n);
    check_sums<int32_t>(*pg, ctx.rank, n);
    check_sums<int64_t>(*pg, ctx.rank, n);
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

TEST_P(PgCollTiny, OtherOpsAndDtypesOfTheSameSize) {
  const int n = GetParam();
  auto r = run_ranks(n, [&](RankContext& ctx) {
    auto pg = make_world(ctx, "shm", milliseconds(30000));
    float f[2] = {static_cast<float>(ctx.rank + 1), static_cast<float>(2 * (ctx.rank + 1))};
    pg->all_reduce(Tensor::of(f, 2), ReduceOp::MAX);
    EXPECT_EQ(f[0], static_cast<float>(n));
    EXPECT_EQ(f[1], static_cast<float>(2 * n));
    float a[2] = {static_cast<float>(ctx.rank), 1.0f};
    pg->all_reduce(Tensor::of(a, 2), ReduceOp::AVG);
    EXPECT_FLOAT_EQ(a[0], static_cast<float>(n - 1) / 2);
    EXPECT_FLOAT_EQ(a[1], 1.0f);
    int16_t s[4] = {1, 2, 3, static_cast<int16_t>(ctx.rank)};
    pg->all_reduce(Tensor::of(s, 4), ReduceOp::SUM);
    EXPECT_EQ(s[0], n);
    EXPECT_EQ(s[3], n * (n - 1) / 2);
    uint8_t u[8] = {1, 1, 1, 1, 1, 1, 1, static_cast<uint8_t>(ctx.rank)};
    pg->all_reduce(Tensor::of(u, 8), ReduceOp::SUM);
    EXPECT_EQ(u[0], n);
    EXPECT_EQ(u[7], n * (n - 1) / 2);
    EXPECT_EQ(last_algo(*pg), "shm_direct");
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

TEST(PgCollTinyErrors, MismatchedCountsFailOnEveryRank) {
  auto r = run_ranks(2, [&](RankContext& ctx) {
    auto pg = make_world(ctx, "shm", milliseconds(20000));
    float warm[2] = {1, 2};
    pg->all_reduce(Tensor::of(warm, 2));  // the shared-memory path is set up
    float v[3] = {1, 2, 3};
    const int64_t count = ctx.rank == 0 ? 2 : 3;
    std::string e =
        error_of<MismatchError>([&] { pg->all_reduce(Tensor::of(v, count), ReduceOp::SUM); });
    EXPECT_NE(e.find("float32[2]"), std::string::npos) << e;
    EXPECT_NE(e.find("float32[3]"), std::string::npos) << e;
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

// The blocking path checks the group once before its call (coll_run.cc): a destroyed group
// still refuses blocking and async calls with the message naming it.
TEST(PgCollTinyErrors, DestroyedGroupRefusesCalls) {
  auto r = run_ranks(2, [&](RankContext& ctx) {
    auto pg = make_world(ctx, "shm", milliseconds(20000));
    float v[2] = {1, 2};
    pg->all_reduce(Tensor::of(v, 2));
    pg->destroy();
    std::string e = error_of<InvalidArgument>([&] { pg->all_reduce(Tensor::of(v, 2)); });
    EXPECT_NE(e.find("was destroyed"), std::string::npos) << e;
    CollectiveOptions async;
    async.async_op = true;
    e = error_of<InvalidArgument>([&] { pg->all_reduce(Tensor::of(v, 2), ReduceOp::SUM, async); });
    EXPECT_NE(e.find("was destroyed"), std::string::npos) << e;
  });
  EXPECT_RANKS_OK(r);
}

// ProcessGroup::all_reduce's fast lane (coll_run.cc, run_tiny_all_reduce) keeps the group's
// sequence numbers in step with the general path: tiny calls interleaved with message-passing
// collectives (all_to_all, whose tags carry the sequence number), async calls (after which
// blocking calls wait for the queue) and calls it declines (an algorithm named, another op,
// larger tensors) all give the right results; bad arguments still get the general path's error.
TEST_P(PgCollTiny, FastLaneInterleavesWithEveryOtherPath) {
  const int n = GetParam();
  auto r = run_ranks(n, [&](RankContext& ctx) {
    auto pg = make_world(ctx, "shm", milliseconds(30000));
    const float fn = static_cast<float>(n);
    for (int rep = 0; rep < 4; ++rep) {
      float t[2] = {1.0f, static_cast<float>(ctx.rank)};
      pg->all_reduce(Tensor::of(t, 2));  // the fast lane
      EXPECT_EQ(t[0], fn);
      EXPECT_EQ(t[1], fn * (fn - 1) / 2);
      EXPECT_EQ(last_algo(*pg), "shm_direct");
      std::vector<int32_t> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
      for (int j = 0; j < n; ++j) in[static_cast<size_t>(j)] = ctx.rank * 100 + j;
      pg->all_to_all_single(Tensor::of(out), Tensor::of(in));  // message passing, seq tags
      for (int j = 0; j < n; ++j) EXPECT_EQ(out[static_cast<size_t>(j)], j * 100 + ctx.rank);
      int64_t c = ctx.rank + 1;
      pg->all_reduce(Tensor::of(&c, 1));  // the fast lane again
      EXPECT_EQ(c, n * (n + 1) / 2);
      CollectiveOptions ring;
      ring.algorithm = "ring";
      double d[2] = {1.0, 2.0};
      pg->all_reduce(Tensor::of(d, 2), ReduceOp::SUM, ring);  // declined: an algorithm named
      EXPECT_EQ(d[1], 2.0 * n);
      EXPECT_EQ(last_algo(*pg), "ring");
      std::vector<float> big(1000, 1.0f);
      pg->all_reduce(Tensor::of(big));  // declined: too large for the shared slots
      EXPECT_EQ(big[999], fn);
      CollectiveOptions async;
      async.async_op = true;
      float a[2] = {2.0f, 3.0f};
      auto w = pg->all_reduce(Tensor::of(a, 2), ReduceOp::SUM, async);
      float b[2] = {1.0f, 1.0f};
      pg->all_reduce(Tensor::of(b, 2));  // after an async call: the general path, in order
      EXPECT_TRUE(w->wait());
      EXPECT_EQ(a[1], 3.0f * fn);
      EXPECT_EQ(b[0], fn);
    }
    std::string e =
        error_of<InvalidArgument>([&] { pg->all_reduce(Tensor::raw(nullptr, 2, DType::Float32)); });
    EXPECT_NE(e.find("all_reduce"), std::string::npos) << e;
    float t[2] = {1.0f, 1.0f};
    pg->all_reduce(Tensor::of(t, 2));  // still usable: nothing was exchanged
    EXPECT_EQ(t[0], fn);
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

// A fast-lane call that times out: TimeoutError naming the call and the rank that did not
// come, the call failed in the flight recorder's dump, and later calls refused (the ranks'
// steps no longer agree).
TEST(PgCollTinyErrors, FastLaneTimeoutIsRecordedAndLaterCallsRefused) {
  auto r = run_ranks(2, [&](RankContext& ctx) {
    const std::string dir = ctx.dir + "/fr";
    setenv("TPCOMM_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
    config::reload();
    auto pg = make_world(ctx, "shm", milliseconds(20000));
    float v[2] = {1, 2};
    pg->all_reduce(Tensor::of(v, 2));
    if (ctx.rank == 1) {  // never calls the second one
      ctx.store->wait({"done/0"}, std::chrono::seconds(60));
      pg->destroy();
      return;
    }
    CollectiveOptions quick;
    quick.timeout = milliseconds(300);
    std::string e =
        error_of<TimeoutError>([&] { pg->all_reduce(Tensor::of(v, 2), ReduceOp::SUM, quick); });
    EXPECT_NE(e.find("all_reduce"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
    std::ifstream f(dir + "/rank0.trace");
    std::stringstream text;
    text << f.rdbuf();
    EXPECT_NE(text.str().find("op seq=1 op=all_reduce dtype=float32 count=2"), std::string::npos)
        << text.str();
    EXPECT_NE(text.str().find("state=failed"), std::string::npos) << text.str();
    e = error_of<Error>([&] { pg->all_reduce(Tensor::of(v, 2)); });
    EXPECT_NE(e.find("unusable after an earlier timeout"), std::string::npos) << e;
    ctx.store->set("done/0", "1");
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

INSTANTIATE_TEST_SUITE_P(Ranks, PgCollTiny, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::to_string(i.param) + "ranks";
                         });

}  // namespace
}  // namespace tpcomm::testing
