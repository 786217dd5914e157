// DeviceMesh over forked ranks: 2x2, 2x4 and 2x2x2 meshes, reductions along each dimension,
// coordinates and local ranks, slicing by names, and the errors for a shape that does not
// match the world or an unknown name.
#include <gtest/gtest.h>

#include "api/api_test_util.h"

namespace tpcomm::testing {
namespace {

// Sum over the group of each member's global rank, by all_reduce.
int64_t sum_of_ranks(const std::shared_ptr<ProcessGroup>& g) {
  int64_t v = get_rank();
  all_reduce(Tensor::of(&v, 1), ReduceOp::SUM, g);
  return v;
}

TEST(DeviceMesh, TwoByTwoReducesAlongEachDimension) {
  auto res = run_ranks(4, [](RankContext& c) {
    init_world(c);
    auto mesh = init_device_mesh("cpu", {2, 2}, {"dp", "tp"});
    int r = c.rank;
    EXPECT_EQ(mesh->get_coordinate(), (std::vector<int64_t>{r / 2, r % 2}));
    EXPECT_EQ(mesh->get_local_rank("dp"), r / 2);
    EXPECT_EQ(mesh->get_local_rank(1), r % 2);
    EXPECT_EQ(mesh->size("tp"), 2);
    EXPECT_EQ(mesh->size(), 4);
    // dp group: ranks with the same tp coordinate {t, t + 2}; tp group: {2d, 2d + 1}.
    EXPECT_EQ(get_process_group_ranks(mesh->get_group("dp")), (std::vector<int>{r % 2, r % 2 + 2}));
    EXPECT_EQ(get_process_group_ranks(mesh->get_group("tp")),
              (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
    EXPECT_EQ(sum_of_ranks(mesh->get_group("dp")), (r % 2) * 2 + 2);
    EXPECT_EQ(sum_of_ranks(mesh->get_group("tp")), (r / 2 * 2) * 2 + 1);
    // Cached: the same group object each time.
    EXPECT_EQ(mesh->get_group("dp"), mesh->get_group(0));
    // A 1-D slice.
    DeviceMesh tp = (*mesh)["tp"];
    EXPECT_EQ(tp.ndim(), 1);
    EXPECT_EQ(tp.mesh(), (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
    EXPECT_EQ(tp.get_group(), mesh->get_group("tp"));
    EXPECT_THROW(mesh->get_group(), InvalidArgument);  // 2-D: name the dimension
    destroy_process_group();
  });
  EXPECT_RANKS_OK(res);
}

TEST(DeviceMesh, TwoByFourAndTwoByTwoByTwo) {
  auto res = run_ranks(8, [](RankContext& c) {
    init_world(c);
    int r = c.rank;
    {
      DeviceMesh m("cpu", {2, 4}, {"a", "b"});
      EXPECT_EQ(m.get_coordinate(), (std::vector<int64_t>{r / 4, r % 4}));
      EXPECT_EQ(m.get_group("b")->size(), 4);
      int64_t base = r / 4 * 4;
      EXPECT_EQ(sum_of_ranks(m.get_group("b")), 4 * base + 6);
      EXPECT_EQ(sum_of_ranks(m.get_group("a")), 2 * (r % 4) + 4);
    }
    {
      DeviceMesh m("cpu", {2, 2, 2}, {"x", "y", "z"});
      std::vector<int64_t> want = {r / 4, (r / 2) % 2, r % 2};
      EXPECT_EQ(m.get_coordinate(), want);
      // Along z: {r & ~1, r | 1}; along x: {r % 4, r % 4 + 4}.
      EXPECT_EQ(sum_of_ranks(m.get_group("z")), (r & ~1) + (r | 1));
      EXPECT_EQ(sum_of_ranks(m.get_group("x")), 2 * (r % 4) + 4);
      EXPECT_EQ(sum_of_ranks(m.get_group("y")), 2 * (r - ((r / 2) % 2) * 2) + 2);
      DeviceMesh xz = m.slice({"x", "z"});
      EXPECT_EQ(xz.shape(), (std::vector<int64_t>{2, 2}));
      int y = (r / 2) % 2;
      EXPECT_EQ(xz.mesh(), (std::vector<int>{2 * y, 2 * y + 1, 4 + 2 * y, 5 + 2 * y}));
      EXPECT_EQ(xz.get_coordinate(), (std::vector<int64_t>{r / 4, r % 2}));
    }
    destroy_process_group();
  });
  EXPECT_RANKS_OK(res);
}

TEST(DeviceMesh, BadShapesAndNamesAreRefused) {
  auto res = run_ranks(4, [](RankContext& c) {
    init_world(c);
    auto msg = [](auto&& f) {
      try {
        f();
      } catch (const InvalidArgument& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    EXPECT_NE(msg([] { init_device_mesh("cpu", {3, 2}); }).find("holds 6 ranks but group"),
              std::string::npos);
    EXPECT_NE(msg([] { init_device_mesh("cpu", {2, 2}, {"a"}); }).find("1 dimension names"),
              std::string::npos);
    EXPECT_NE(msg([] { init_device_mesh("cpu", {2, 2}, {"a", "a"}); }).find("given twice"),
              std::string::npos);
    EXPECT_NE(msg([] { init_device_mesh("cpu", {4, 0}); }).find("not positive"), std::string::npos);
    EXPECT_NE(msg([] { init_device_mesh("tpu", {4}); }).find("'tpu' is not supported"),
              std::string::npos);
    auto m = init_device_mesh("cpu", {4}, {"dp"});
    EXPECT_NE(msg([&] { m->get_group("tp"); }).find("no dimension named 'tp' (the mesh has 'dp')"),
              std::string::npos);
    EXPECT_NE(msg([&] { m->size(3); }).find("out of range"), std::string::npos);
    EXPECT_EQ(m->get_group(), default_group());  // the whole world along its only dimension
    destroy_process_group();
  });
  EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace tpcomm::testing
