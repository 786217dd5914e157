// Tier (b): every collective through ProcessGroup over shm, tcp and UCX (its tcp and shared
// memory), with 1, 2, 3, 4, 5 and 8 forked ranks, dtypes int32/float32/bfloat16/float64,
// element counts 0, 1, 7 and one not divisible by the group size; one 64 MiB all_reduce.
#include "pg_coll/pg_coll_util.h"

namespace tpcomm::testing {
namespace {

struct Case {
  std::string transport;
  int ranks;
  std::string ucx_tls = "";  ///< TPCOMM_UCX_TLS for the ucx cases
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.transport << (c.ucx_tls.empty() ? "" : "(" + c.ucx_tls + ")") << " x " << c.ranks
      << " ranks";
}

// rank a sends s(a, b) elements to rank b in the uneven all_to_all_single.
size_t split(int a, int b, size_t count) {
  return static_cast<size_t>((2 * a + b) % 3) + count % 2;
}

// Every operation once for (dtype, count); `tag` names the case in failure messages.
void all_ops(ProcessGroup& pg, DType dt, size_t count) {
  const int n = pg.size(), me = pg.rank();
  const std::string tag = std::string(dtype_name(dt)) + "[" + std::to_string(count) + "]";
  const size_t un = static_cast<size_t>(n);

  {  // all_reduce SUM and MAX, in place
    Buf b(dt, count);
    for (size_t i = 0; i < count; ++i) b.set(i, val(me, i));
    pg.all_reduce(b.tensor());
    EXPECT_EQ(first_wrong(b,
                          [&](size_t i) {
                            double s = 0;
                            for (int r = 0; r < n; ++r) s += val(r, i);
                            return s;
                          }),
              -1)
        << "all_reduce sum " << tag;
    for (size_t i = 0; i < count; ++i) b.set(i, val(me, i));
    pg.all_reduce(b.tensor(), ReduceOp::MAX);
    EXPECT_EQ(first_wrong(b, [&](size_t i) { return val(n - 1, i); }), -1)
        << "all_reduce max " << tag;
  }
  {  // broadcast
    int root = static_cast<int>(count % un);
    Buf b(dt, count);
    for (size_t i = 0; i < count; ++i) b.set(i, me == root ? val(root, i) : -1);
    pg.broadcast(b.tensor(), root);
    EXPECT_EQ(first_wrong(b, [&](size_t i) { return val(root, i); }), -1) << "broadcast " << tag;
  }
  {  // reduce
    int dst = static_cast<int>((count + 1) % un);
    Buf b(dt, count);
    for (size_t i = 0; i < count; ++i) b.set(i, val(me, i));
    pg.reduce(b.tensor(), dst);
    EXPECT_EQ(first_wrong(b,
                          [&](size_t i) {
                            if (me != dst) return val(me, i);
                            double s = 0;
                            for (int r = 0; r < n; ++r) s += val(r, i);
                            return s;
                          }),
              -1)
        << "reduce " << tag;
  }
  {  // all_gather (list) and all_gather_into_tensor
    Buf in(dt, count), out(dt, count * un);
    for (size_t i = 0; i < count; ++i) in.set(i, val(me, i));
    std::vector<Tensor> list;
    std::vector<Buf> outs(un, Buf(dt, count));
    for (auto& o : outs) list.push_back(o.tensor());
    pg.all_gather(list, in.tensor());
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(first_wrong(outs[r], [&](size_t i) { return val(r, i); }), -1)
          << "all_gather " << tag << " block " << r;
    pg.all_gather_into_tensor(out.tensor(), in.tensor());
    EXPECT_EQ(
        first_wrong(out, [&](size_t i) { return val(static_cast<int>(i / count), i % count); }), -1)
        << "all_gather_into_tensor " << tag;
  }
  {  // gather and scatter (list forms)
    int root = static_cast<int>((count + 2) % un);
    Buf in(dt, count);
    for (size_t i = 0; i < count; ++i) in.set(i, val(me, i));
    std::vector<Buf> outs(me == root ? un : 0, Buf(dt, count));
    std::vector<Tensor> list;
    for (auto& o : outs) list.push_back(o.tensor());
    pg.gather(in.tensor(), list, root);
    for (size_t r = 0; r < outs.size(); ++r)
      EXPECT_EQ(first_wrong(outs[r], [&](size_t i) { return val(static_cast<int>(r), i); }), -1)
          << "gather " << tag << " block " << r;
    Buf got(dt, count);
    pg.scatter(got.tensor(), list, root);  // the root scatters what it gathered
    EXPECT_EQ(first_wrong(got, [&](size_t i) { return val(me, i); }), -1) << "scatter " << tag;
  }
  {  // reduce_scatter (list) and reduce_scatter_tensor
    Buf in(dt, count * un), out(dt, count), out2(dt, count);
    for (size_t i = 0; i < count * un; ++i) in.set(i, val(me, i));
    std::vector<Tensor> list;
    for (int r = 0; r < n; ++r) list.push_back(in.view(r * count, count));
    auto want = [&](size_t i) {
      double s = 0;
      for (int r = 0; r < n; ++r) s += val(r, me * count + i);
      return s;
    };
    pg.reduce_scatter(out.tensor(), list);
    EXPECT_EQ(first_wrong(out, want), -1) << "reduce_scatter " << tag;
    pg.reduce_scatter_tensor(out2.tensor(), in.tensor());
    EXPECT_EQ(first_wrong(out2, want), -1) << "reduce_scatter_tensor " << tag;
  }
  {  // all_to_all (list) and all_to_all_single (even)
    auto code = [](int from, int to, size_t i) {
      return static_cast<double>((from * 3 + to * 5 + i) % 50);
    };
    Buf in(dt, count * un), out(dt, count * un), out2(dt, count * un);
    for (int j = 0; j < n; ++j)
      for (size_t i = 0; i < count; ++i) in.set(j * count + i, code(me, j, i));
    std::vector<Tensor> ins, outs;
    for (int j = 0; j < n; ++j) {
      ins.push_back(in.view(j * count, count));
      outs.push_back(out.view(j * count, count));
    }
    auto want = [&](size_t k) { return code(static_cast<int>(k / count), me, k % count); };
    pg.all_to_all(outs, ins);
    EXPECT_EQ(first_wrong(out, want), -1) << "all_to_all " << tag;
    pg.all_to_all_single(out2.tensor(), in.tensor());
    EXPECT_EQ(first_wrong(out2, want), -1) << "all_to_all_single " << tag;
  }
  {  // all_to_all_single with split sizes
    std::vector<int64_t> in_splits(un), out_splits(un);
    size_t in_total = 0, out_total = 0;
    for (int j = 0; j < n; ++j) {
      in_splits[j] = static_cast<int64_t>(split(me, j, count));
      out_splits[j] = static_cast<int64_t>(split(j, me, count));
      in_total += split(me, j, count);
      out_total += split(j, me, count);
    }
    Buf in(dt, in_total), out(dt, out_total);
    size_t k = 0;
    for (int j = 0; j < n; ++j)
      for (size_t i = 0; i < split(me, j, count); ++i) in.set(k++, (me * 7 + j * 3 + i) % 50);
    pg.all_to_all_single(out.tensor(), in.tensor(), out_splits, in_splits);
    k = 0;
    for (int j = 0; j < n; ++j)
      for (size_t i = 0; i < split(j, me, count); ++i, ++k)
        ASSERT_EQ(out.get(k), static_cast<double>((j * 7 + me * 3 + i) % 50))
            << "all_to_all_single splits " << tag << " from rank " << j << " element " << i;
  }
  pg.barrier();
}

class Ops : public ::testing::TestWithParam<Case> {};

TEST_P(Ops, EveryOperationDTypeAndSize) {
  Case c = GetParam();
  RunOptions opt;
  if (c.transport == "ucx") {
    if (!is_ucx_available()) GTEST_SKIP() << "UCX is not built in or not usable here";
    opt.env = {{"TPCOMM_UCX_TLS", c.ucx_tls}};
  }
  auto r = run_ranks(c.ranks, [&](RankContext& ctx) {
    auto pg = make_world(ctx, c.transport);
    const size_t odd = static_cast<size_t>(3 * c.ranks + 1);  // not divisible by the group size
    // 5 and 8 ranks on 2 cores are slow: every dtype at one size, float32 at the others.
    const bool big = c.ranks > 4;
    for (DType dt : {DType::Int32, DType::Float32, DType::BFloat16, DType::Float64}) {
      std::vector<size_t> counts = {odd};
      if (!big || dt == DType::Float32) counts.insert(counts.end(), {0, 1, 7});
      if (!big) counts.push_back(4099);
      for (size_t count : counts) all_ops(*pg, dt, count);
    }
    // Other reductions, once.
    Buf b(DType::Float32, 33);
    for (size_t i = 0; i < 33; ++i) b.set(i, val(pg->rank(), i));
    pg->all_reduce(b.tensor(), ReduceOp::AVG);
    EXPECT_EQ(first_wrong(b,
                          [&](size_t i) {
                            double s = 0;
                            for (int q = 0; q < pg->size(); ++q) s += val(q, i);
                            return s / pg->size();
                          }),
              -1);
    Buf x(DType::Int32, 9);
    for (size_t i = 0; i < 9; ++i) x.set(i, 1 << pg->rank());
    pg->all_reduce(x.tensor(), ReduceOp::BOR);
    EXPECT_EQ(first_wrong(x, [&](size_t) { return (1 << pg->size()) - 1; }), -1);
    pg->destroy();
  }, opt);
  EXPECT_RANKS_OK(r);
}

INSTANTIATE_TEST_SUITE_P(PgColl, Ops,
                         ::testing::Values(Case{"shm", 1}, Case{"shm", 2}, Case{"shm", 3},
                                           Case{"shm", 4}, Case{"shm", 5}, Case{"shm", 8},
                                           Case{"tcp", 1}, Case{"tcp", 2}, Case{"tcp", 3},
                                           Case{"tcp", 4}, Case{"tcp", 5}, Case{"tcp", 8},
                                           // UCX over its tcp and its shared memory
                                           Case{"ucx", 2, "tcp"}, Case{"ucx", 3, "tcp"},
                                           Case{"ucx", 2, "shm,self"}, Case{"ucx", 4, "shm,self"}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string tls = i.param.ucx_tls.substr(0, i.param.ucx_tls.find(','));
                           return i.param.transport + (tls.empty() ? "" : "_" + tls) + "_" +
                                  std::to_string(i.param.ranks);
                         });

// One large all_reduce per transport (64 MiB of float32 over shm, 16 MiB over tcp).
TEST(PgCollLarge, AllReduce64MiB) {
  for (std::string t : {"shm", "tcp"}) {
    auto r = run_ranks(2, [&](RankContext& ctx) {
      auto pg = make_world(ctx, t);
      const size_t n = (t == "shm" ? 64u : 16u) << 20 >> 2;
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i % 1000) + pg->rank());
      pg->all_reduce(Tensor::of(v));
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(v[i], static_cast<float>(2 * (i % 1000) + 1)) << t << " element " << i;
      pg->destroy();
    });
    EXPECT_RANKS_OK(r) << t;
  }
}

}  // namespace
}  // namespace tpcomm::testing
