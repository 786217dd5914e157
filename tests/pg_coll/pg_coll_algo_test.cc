// Tier (b): every algorithm of the catalogue forced through TPCOMM_ALGO over a real transport
// (checked to be the one that ran, and its result); async_op Works in call order; subgroups
// running collectives concurrently with the world.
#include <thread>

#include "collectives/select.h"
#include "core/config.h"
#include "pg_coll/pg_coll_util.h"

namespace tpcomm::testing {
namespace {

using coll::CollOp;

// Round k forces algorithm k (mod the catalogue size) of every operation.
std::string rules_for_round(int k) {
  std::string rules;
  for (int op = 0; op < coll::kNumCollOps; ++op) {
    auto cat = coll::catalogue(static_cast<CollOp>(op));
    rules += std::string(rules.empty() ? "" : ";") + coll::coll_op_name(static_cast<CollOp>(op)) +
             ":" + cat[static_cast<size_t>(k) % cat.size()].name;
  }
  return rules;
}

std::string expected(CollOp op, int k) {
  auto cat = coll::catalogue(op);
  return cat[static_cast<size_t>(k) % cat.size()].name;
}

void forced_rounds(ProcessGroup& pg) {
  const int n = pg.size(), me = pg.rank();
  const size_t count = 1000 * static_cast<size_t>(n) + 3;
  size_t rounds = 0;
  for (int op = 0; op < coll::kNumCollOps; ++op)
    rounds = std::max(rounds, coll::catalogue(static_cast<CollOp>(op)).size());
  for (int k = 0; k < static_cast<int>(rounds); ++k) {
    std::string rules = rules_for_round(k);
    setenv("TPCOMM_ALGO", rules.c_str(), 1);
    config::reload();
    SCOPED_TRACE(rules);
    Buf b(DType::Float32, count);
    for (size_t i = 0; i < count; ++i) b.set(i, val(me, i));
    pg.all_reduce(b.tensor());
    EXPECT_EQ(last_algo(pg), expected(CollOp::AllReduce, k));
    EXPECT_EQ(first_wrong(b, [&](size_t i) { return n * (n + 1) / 2 + n * double(i % 5); }), -1);

    for (size_t i = 0; i < count; ++i) b.set(i, me == 1 % n ? val(7, i) : 0);
    pg.broadcast(b.tensor(), 1 % n);
    EXPECT_EQ(last_algo(pg), expected(CollOp::Broadcast, k));
    EXPECT_EQ(first_wrong(b, [&](size_t i) { return val(7, i); }), -1);

    for (size_t i = 0; i < count; ++i) b.set(i, val(me, i));
    pg.reduce(b.tensor(), n - 1);
    EXPECT_EQ(last_algo(pg), expected(CollOp::Reduce, k));
    if (me == n - 1) {
      EXPECT_EQ(first_wrong(b, [&](size_t i) { return n * (n + 1) / 2 + n * double(i % 5); }), -1);
    }

    const size_t blk = 301;
    Buf in(DType::Int32, blk), all(DType::Int32, blk * n), out(DType::Int32, blk);
    for (size_t i = 0; i < blk; ++i) in.set(i, me * 1000 + i);
    pg.all_gather_into_tensor(all.tensor(), in.tensor());
    EXPECT_EQ(last_algo(pg), expected(CollOp::AllGather, k));
    EXPECT_EQ(first_wrong(all, [&](size_t i) { return double((i / blk) * 1000 + i % blk); }), -1);

    std::vector<Tensor> list;
    Buf g(DType::Int32, blk * n);
    if (me == 0)
      for (int r = 0; r < n; ++r) list.push_back(g.view(r * blk, blk));
    pg.gather(in.tensor(), list, 0);
    EXPECT_EQ(last_algo(pg), expected(CollOp::Gather, k));
    if (me == 0) {
      EXPECT_EQ(first_wrong(g, [&](size_t i) { return all.get(i); }), -1);
    }
    pg.scatter(out.tensor(), list, 0);
    EXPECT_EQ(last_algo(pg), expected(CollOp::Scatter, k));
    EXPECT_EQ(first_wrong(out, [&](size_t i) { return in.get(i); }), -1);

    pg.reduce_scatter_tensor(out.tensor(), all.tensor());
    EXPECT_EQ(last_algo(pg), expected(CollOp::ReduceScatter, k));
    EXPECT_EQ(first_wrong(out, [&](size_t i) { return n * all.get(me * blk + i); }), -1);

    Buf a2a(DType::Int32, blk * n);
    pg.all_to_all_single(a2a.tensor(), all.tensor());
    EXPECT_EQ(last_algo(pg), expected(CollOp::AllToAll, k));
    EXPECT_EQ(first_wrong(a2a, [&](size_t i) { return all.get(me * blk + i % blk); }), -1);

    pg.barrier();
    EXPECT_EQ(last_algo(pg), expected(CollOp::Barrier, k));
  }
  unsetenv("TPCOMM_ALGO");
  config::reload();
}

TEST(PgCollAlgo, EveryAlgorithmForcedOverTcp3) {
  auto r = run_ranks(3, [&](RankContext& ctx) {
    auto pg = make_world(ctx, "tcp");
    forced_rounds(*pg);
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

TEST(PgCollAlgo, EveryAlgorithmForcedOverShm4) {
  auto r = run_ranks(4, [&](RankContext& ctx) {
    auto pg = make_world(ctx, "shm");
    forced_rounds(*pg);
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

// Groups on one host over shm take the direct-read fast path (shm_direct) for the operations
// it handles; over tcp, or with TPCOMM_ALGO forcing another algorithm, message passing runs.
TEST(PgCollAlgo, IntraHostFastPath) {
  for (std::string t : {"shm", "tcp"}) {
    auto r = run_ranks(3, [&](RankContext& ctx) {
      auto pg = make_world(ctx, t);
      std::vector<float> v(1000, 1.0f), all(3000);
      pg->all_reduce(Tensor::of(v));
      EXPECT_EQ(v[999], 3.0f);
      if (t == "shm") {
        EXPECT_EQ(last_algo(*pg), "shm_direct");
      } else {
        EXPECT_NE(last_algo(*pg), "shm_direct");
      }
      pg->broadcast(Tensor::of(v), 2);
      pg->all_gather_into_tensor(Tensor::of(all), Tensor::of(v));
      EXPECT_EQ(all[2999], 3.0f);
      pg->barrier();
      // A subgroup made after TPCOMM_ALGO forces ring keeps all_reduce on message passing.
      setenv("TPCOMM_ALGO", "allreduce:ring", 1);
      config::reload();
      auto g = pg->new_group({0, 1, 2});
      g->all_reduce(Tensor::of(v));
      EXPECT_EQ(last_algo(*g), "ring");
      EXPECT_EQ(v[0], 9.0f);
      unsetenv("TPCOMM_ALGO");
      config::reload();
      pg->destroy();
    });
    EXPECT_RANKS_OK(r) << t;
  }
}

// The per-call option forces an algorithm too, and an unknown name is refused locally.
TEST(PgCollAlgo, OptionForcesAlgorithm) {
  auto r = run_ranks(2, [&](RankContext& ctx) {
    auto pg = make_world(ctx, "shm");
    std::vector<float> v(100, 1.0f);
    CollectiveOptions o;
    o.algorithm = "recursive_doubling";
    pg->all_reduce(Tensor::of(v), ReduceOp::SUM, o);
    EXPECT_EQ(last_algo(*pg), "recursive_doubling");
    EXPECT_EQ(v[99], 2.0f);
    o.algorithm = "nonesuch";
    std::string e =
        error_of<InvalidArgument>([&] { pg->all_reduce(Tensor::of(v), ReduceOp::SUM, o); });
    EXPECT_NE(e.find("nonesuch"), std::string::npos) << e;
    pg->all_reduce(Tensor::of(v));  // still usable
    EXPECT_EQ(v[0], 4.0f);
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

// async_op: Works complete in call order on the collective thread; a blocking call waits for
// them; an async call's error comes back through Work::wait.
TEST(PgCollAsync, WorksInOrderAndErrors) {
  auto r = run_ranks(3, [&](RankContext& ctx) {
    auto pg = make_world(ctx, "shm");
    const int n = pg->size();
    std::vector<std::vector<int32_t>> bufs(10, std::vector<int32_t>(1000));
    std::vector<std::shared_ptr<Work>> works;
    CollectiveOptions async;
    async.async_op = true;
    std::vector<int32_t> seq(1, pg->rank());
    for (size_t k = 0; k < bufs.size(); ++k) {
      for (auto& x : bufs[k]) x = static_cast<int32_t>(k + 1);
      works.push_back(pg->all_reduce(Tensor::of(bufs[k]), ReduceOp::SUM, async));
      if (k == 4) works.push_back(pg->broadcast(Tensor::of(seq), 0, async));
    }
    std::vector<int32_t> last(5, pg->rank());
    auto bw = pg->all_reduce(Tensor::of(last), ReduceOp::MAX);  // blocking: after all of them
    EXPECT_TRUE(bw->is_completed());
    EXPECT_EQ(last[0], n - 1);
    for (auto& w : works) {
      EXPECT_TRUE(w->is_completed());  // done before the blocking call ran
      EXPECT_TRUE(w->wait(std::chrono::seconds(30)));
      EXPECT_TRUE(w->is_success());
      EXPECT_EQ(w->exception(), nullptr);
    }
    for (size_t k = 0; k < bufs.size(); ++k)
      EXPECT_EQ(bufs[k][999], n * static_cast<int32_t>(k + 1));
    EXPECT_EQ(seq[0], 0);
    // Bad input on every rank: the Work fails with InvalidArgument, nobody hangs.
    std::vector<float> f(4, 1.0f);
    auto bad = pg->all_reduce(Tensor::of(f), ReduceOp::BXOR, async);
    std::string e = error_of<InvalidArgument>([&] { bad->wait(std::chrono::seconds(30)); });
    EXPECT_NE(e.find("BXOR"), std::string::npos) << e;
    EXPECT_TRUE(bad->is_completed());
    EXPECT_FALSE(bad->is_success());
    EXPECT_NE(bad->exception(), nullptr);
    // And the group goes on.
    auto ok = pg->all_reduce(Tensor::of(f), ReduceOp::SUM, async);
    ok->wait();
    EXPECT_EQ(f[3], static_cast<float>(n));
    // Free functions with async_op (after init_process_group-free use: pass the group).
    auto fw = tpcomm::all_reduce(Tensor::of(f), ReduceOp::SUM, pg, /*async_op=*/true);
    fw->wait();
    EXPECT_EQ(f[0], static_cast<float>(n * n));
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

// Two disjoint subgroups run collectives from one thread while another thread runs world
// collectives, over tcp and shm.
TEST(PgCollGroups, SubgroupsConcurrentWithWorld) {
  for (std::string t : {"tcp", "shm"}) {
    auto r = run_ranks(4, [&](RankContext& ctx) {
      auto pg = make_world(ctx, t);
      const int me = pg->rank();
      auto lo = pg->new_group({0, 1});
      auto hi = pg->new_group({2, 3});
      auto sub = me < 2 ? lo : hi;
      ASSERT_TRUE(sub->is_member());
      std::thread side([&] {
        for (int k = 0; k < 30; ++k) {
          std::vector<int64_t> v(257 + k, me + k);
          sub->all_reduce(Tensor::of(v));
          int64_t want = me < 2 ? (0 + 1 + 2 * k) : (2 + 3 + 2 * k);
          ASSERT_EQ(v[256], want) << "subgroup round " << k;
          std::vector<int64_t> g(2);
          tpcomm::all_gather_into_tensor(Tensor::of(g), Tensor::of(&v[0], 1), sub);
          ASSERT_EQ(g[0], want);
        }
      });
      for (int k = 0; k < 30; ++k) {
        std::vector<float> v(1000 + k, static_cast<float>(me));
        auto w = pg->all_reduce(Tensor::of(v), ReduceOp::SUM, {.async_op = (k % 2 == 0)});
        w->wait();
        ASSERT_EQ(v[999], 6.0f) << "world round " << k;
      }
      side.join();
      // Global ranks in the free functions: broadcast from global rank 3 inside `hi`.
      if (me >= 2) {
        std::vector<int32_t> x(3, me);
        tpcomm::broadcast(Tensor::of(x), 3, hi);
        EXPECT_EQ(x[2], 3);
      }
      pg->barrier();
      pg->destroy();
    });
    EXPECT_RANKS_OK(r) << t;
  }
}

}  // namespace
}  // namespace tpcomm::testing
