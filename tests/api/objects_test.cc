// Object collectives over forked ranks: every function with 1 to 8 ranks, objects of 0 bytes
// up to 64 MiB of different sizes per rank, typed helpers, and the type check of
// all_gather_object_enforce_type failing on every rank with the ranks and types named.
#include <gtest/gtest.h>

#include "api/api_test_util.h"

namespace tpcomm::testing {
namespace {

// Rank r's object: r * 1000 + 3 bytes (rank 0 also tries 0 bytes via `zero`), patterned.
Object rank_object(int r, bool zero_for_rank0 = true) {
  size_t n = (r == 0 && zero_for_rank0) ? 0 : static_cast<size_t>(r) * 1000 + 3;
  Object o(n);
  for (size_t i = 0; i < n; ++i) o[i] = static_cast<uint8_t>(r * 17 + i * 3);
  return o;
}

class ObjectsTest : public ::testing::TestWithParam<int> {};

TEST_P(ObjectsTest, EveryFunction) {
  int n = GetParam();
  auto res = run_ranks(n, [](RankContext& c) {
    init_world(c);
    int me = c.rank, size = c.world_size;
    // all_gather_object
    std::vector<Object> all;
    all_gather_object(all, rank_object(me));
    ASSERT_EQ(static_cast<int>(all.size()), size);
    for (int r = 0; r < size; ++r) EXPECT_EQ(all[r], rank_object(r)) << "from rank " << r;
    // gather_object to the last rank
    int dst = size - 1;
    std::vector<Object> gathered;
    gather_object(rank_object(me), me == dst ? &gathered : nullptr, dst);
    if (me == dst) {
      ASSERT_EQ(static_cast<int>(gathered.size()), size);
      for (int r = 0; r < size; ++r) EXPECT_EQ(gathered[r], rank_object(r));
    }
    // broadcast_object_list from the last rank: three objects, one empty
    std::vector<Object> list;
    if (me == dst) list = {obj("alpha"), Object{}, rank_object(3, false)};
    else list = {obj("stale")};
    broadcast_object_list(list, dst);
    ASSERT_EQ(list.size(), 3u);
    EXPECT_EQ(list[0], obj("alpha"));
    EXPECT_TRUE(list[1].empty());
    EXPECT_EQ(list[2], rank_object(3, false));
    // scatter_object_list from rank 0
    std::vector<Object> in, out;
    if (me == 0)
      for (int r = 0; r < size; ++r) in.push_back(rank_object(r));
    scatter_object_list(out, in, 0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], rank_object(me));
    // send/recv_object_list around a ring (any source on even ranks)
    if (size > 1) {
      int next = (me + 1) % size, prev = (me + size - 1) % size;
      std::vector<Object> got;
      if (me % 2 == 0) {
        send_object_list({obj("from " + std::to_string(me)), rank_object(me)}, next);
        int from = recv_object_list(got, me % 2 == 0 ? kAnySource : prev);
        EXPECT_EQ(from, prev);
      } else {
        EXPECT_EQ(recv_object_list(got, prev), prev);
        send_object_list({obj("from " + std::to_string(me)), rank_object(me)}, next);
      }
      ASSERT_EQ(got.size(), 2u);
      EXPECT_EQ(got[0], obj("from " + std::to_string(prev)));
      EXPECT_EQ(got[1], rank_object(prev));
    }
    destroy_process_group();
  });
  EXPECT_RANKS_OK(res);
}

INSTANTIATE_TEST_SUITE_P(Ranks, ObjectsTest, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

TEST(Objects, SizesFromZeroTo64MiBAcrossRanksAndTypedHelpers) {
  auto res = run_ranks(3, [](RankContext& c) {
    init_world(c);
    // 0 B, 1 B and 64 MiB on different ranks.
    size_t sizes[3] = {0, 1, size_t{64} << 20};
    Object mine(sizes[c.rank], static_cast<uint8_t>(c.rank + 1));
    std::vector<Object> all;
    all_gather_object(all, mine);
    for (int r = 0; r < 3; ++r) {
      ASSERT_EQ(all[r].size(), sizes[r]);
      if (sizes[r]) {
        EXPECT_EQ(all[r].back(), static_cast<uint8_t>(r + 1));
      }
    }
    // Typed helpers.
    struct Point {
      int32_t x;
      double y;
    };
    std::vector<Object> pts;
    all_gather_object(pts, to_object(Point{c.rank, c.rank * 0.5}));
    for (int r = 0; r < 3; ++r) {
      Point p = from_object<Point>(pts[r]);
      EXPECT_EQ(p.x, r);
      EXPECT_EQ(p.y, r * 0.5);
    }
    std::vector<Object> strs;
    all_gather_object(strs, to_object(std::string(c.rank, 'z')));
    EXPECT_EQ(from_object<std::string>(strs[2]), "zz");
    std::vector<Object> vecs;
    all_gather_object(vecs, to_object(std::vector<float>(c.rank, 1.5f)));
    EXPECT_EQ(from_object<std::vector<float>>(vecs[2]), std::vector<float>(2, 1.5f));
    EXPECT_THROW(from_object<Point>(strs[2]), InvalidArgument);
    destroy_process_group();
  });
  EXPECT_RANKS_OK(res);
}

TEST(Objects, EnforceTypeFailsOnEveryRankNamingRanksAndTypes) {
  auto res = run_ranks(4, [](RankContext& c) {
    init_world(c);
    std::vector<TypedObject> out;
    // Same type everywhere: fine.
    all_gather_object_enforce_type(nullptr, out, make_typed_object(int64_t{c.rank}));
    ASSERT_EQ(out.size(), 4u);
    EXPECT_EQ(from_object<int64_t>(out[3].bytes), 3);
    // Rank 2 sends a double: every rank fails with the same message.
    TypedObject mine = c.rank == 2 ? make_typed_object(2.0) : make_typed_object(int64_t{c.rank});
    try {
      all_gather_object_enforce_type(nullptr, out, mine);
      ADD_FAILURE() << "no error on rank " << c.rank;
    } catch (const MismatchError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("2 different types"), std::string::npos) << m;
      EXPECT_NE(m.find("ranks 0,1,3 have '" + type_name<int64_t>() + "'"), std::string::npos) << m;
      EXPECT_NE(m.find("ranks 2 have '" + type_name<double>() + "'"), std::string::npos) << m;
    }
    // Still usable afterwards.
    std::vector<Object> all;
    all_gather_object(all, obj("ok"));
    EXPECT_EQ(all[1], obj("ok"));
    destroy_process_group();
  });
  EXPECT_RANKS_OK(res);
}

TEST(Objects, BadInputIsRefusedClearly) {
  auto res = run_ranks(2, [](RankContext& c) {
    init_world(c);
    // scatter with the wrong number of objects: refused on the source before communicating;
    // the other rank then gets a timeout... so both ranks call with a bad list.
    std::vector<Object> out;
    try {
      scatter_object_list(out, {obj("only one")}, c.rank);  // each rank is its own bad source
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("passed 1 objects for a group of 2"), std::string::npos)
          << e.what();
    }
    try {
      gather_object(obj("x"), nullptr, c.rank);
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("must pass an output list"), std::string::npos);
    }
    destroy_process_group();
  });
  EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace tpcomm::testing
