// Tier (b): forked ranks exchange tensors over each transport, for 2, 3, 4 and 8 ranks, over
// sizes from 0 bytes to 64 MiB and several dtypes.
#include "p2p/p2p_test_util.h"

namespace tpcomm::testing {
namespace {

struct Case {
  std::string transport;
  int ranks;
};

// Names the case in test listings ("tcp x 4 ranks") instead of dumping its bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.transport << " x " << c.ranks << " ranks";
}

class Exchange : public ::testing::TestWithParam<Case> {};

// Each rank sends to the next and receives from the previous, for every (size, dtype).
TEST_P(Exchange, RingSizesAndDTypes) {
  Case c = GetParam();
  auto r = run_ranks(c.ranks, [&](RankContext& ctx) {
    auto pg = make_world(ctx, c.transport);
    int n = pg->size(), me = pg->rank();
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    const std::vector<size_t> sizes = {0, 1, 7, 1001, 4096, 65536 + 8, 1 << 20};
    const std::vector<DType> dtypes = {DType::UInt8,   DType::Int32,    DType::Float32,
                                       DType::Float64, DType::BFloat16, DType::Int64};
    int seed = 0;
    for (size_t bytes : sizes) {
      for (DType t : dtypes) {
        size_t es = dtype_size(t);
        size_t nb = bytes / es * es;
        if (bytes == 1) nb = es;  // one element
        std::vector<uint8_t> out(nb), in(nb, 0xEE);
        fill_pattern(out, t, seed * 100 + me);
        auto rw = pg->irecv(as_tensor(in, t), prev, seed);
        auto sw = pg->isend(as_tensor(out, t), next, seed);
        sw->wait();
        rw->wait();
        ASSERT_EQ(rw->source_rank(), prev);
        ASSERT_EQ(check_pattern(in, t, seed * 100 + prev), -1)
            << nb << " bytes of " << dtype_name(t) << " from rank " << prev;
        ++seed;
      }
    }
    // 64 MiB, once, float32.
    std::vector<uint8_t> out(64 << 20), in(64 << 20, 0);
    fill_pattern(out, DType::Float32, me);
    auto rw = pg->irecv(as_tensor(in, DType::Float32), prev, 999);
    pg->send(as_tensor(out, DType::Float32), next, 999);
    rw->wait();
    ASSERT_EQ(check_pattern(in, DType::Float32, prev), -1);
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

// Every rank exchanges with every other at once (all links in use together).
TEST_P(Exchange, AllPairs) {
  Case c = GetParam();
  auto r = run_ranks(c.ranks, [&](RankContext& ctx) {
    auto pg = make_world(ctx, c.transport);
    int n = pg->size(), me = pg->rank();
    for (size_t bytes : {size_t(8), size_t(300000)}) {
      std::vector<std::vector<uint8_t>> out(n, std::vector<uint8_t>(bytes)),
          in(n, std::vector<uint8_t>(bytes));
      std::vector<std::shared_ptr<Work>> works;
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;
        fill_pattern(out[p], DType::UInt8, me * 16 + p);
        works.push_back(pg->irecv(Tensor::of(in[p]), p, 5));
        works.push_back(pg->isend(Tensor::of(out[p]), p, 5));
      }
      for (auto& w : works) w->wait();
      for (int p = 0; p < n; ++p) {
        if (p != me) {
          ASSERT_EQ(check_pattern(in[p], DType::UInt8, p * 16 + me), -1) << p;
        }
      }
    }
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const std::string& t : p2p_transports())
    for (int n : {2, 3, 4, 8}) out.push_back({t, n});
  return out;
}

INSTANTIATE_TEST_SUITE_P(P2P, Exchange, ::testing::ValuesIn(cases()), [](const auto& info) {
  return info.param.transport + "_" + std::to_string(info.param.ranks) + "ranks";
});

}  // namespace
}  // namespace tpcomm::testing
