// Works of point-to-point operations are recycled (pg/p2p_work.cc): a reused Work must carry
// nothing of its previous operation (result, error, source, group), and Works still held keep
// their own results while others are recycled around them.
#include <deque>

#include "p2p/p2p_test_util.h"

namespace tpcomm::testing {
namespace {

TEST(WorkReuse, RecycledWorksKeepTheirOwnResults) {
  auto r = run_ranks(2, [&](RankContext& c) {
    auto world = make_world(c, "shm");
    int peer = 1 - c.rank;
    // Many operations; the last few Works stay alive and must keep their results.
    std::vector<int32_t> in(300, -1);
    std::deque<std::pair<std::shared_ptr<Work>, int>> kept;
    for (int i = 0; i < 300; ++i) {
      int32_t out = i * 3 + c.rank;
      std::shared_ptr<Work> rw = world->irecv(Tensor::of(&in[static_cast<size_t>(i)], 1), peer);
      world->send(Tensor::of(&out, 1), peer);
      rw->wait();
      kept.emplace_back(rw, i);
      if (kept.size() > 5) kept.pop_front();
      for (auto& [w, j] : kept) {
        ASSERT_TRUE(w->is_completed());
        ASSERT_TRUE(w->is_success());
        ASSERT_EQ(w->exception(), nullptr);
        ASSERT_EQ(w->source_rank(), peer);
        ASSERT_EQ(in[static_cast<size_t>(j)], j * 3 + peer);
      }
    }
    // A failed receive keeps its error while others are recycled; the Work made after it is
    // released carries none.
    std::shared_ptr<Work> failed;
    if (c.rank == 1) {
      float wrong = 0;
      failed = world->irecv(Tensor::of(&wrong, 1), peer, 9);
      EXPECT_THROW(failed->wait(), MismatchError);
    } else {
      int32_t x = 1;
      world->send(Tensor::of(&x, 1), peer, 9);
    }
    for (int i = 0; i < 20; ++i) {
      int32_t out = i, got = -1;
      auto rw = world->irecv(Tensor::of(&got, 1), peer);
      world->send(Tensor::of(&out, 1), peer);
      rw->wait();
      EXPECT_TRUE(rw->is_success());
      EXPECT_EQ(got, i);
    }
    if (failed) {
      EXPECT_FALSE(failed->is_success());
      EXPECT_NE(failed->exception(), nullptr);
      failed.reset();
    }
    // Works of another group (group ranks in the other order) report that group's ranks,
    // also after the world's Works were recycled, and after that group is gone.
    for (int round = 0; round < 2; ++round) {
      auto sub = round == 0 ? world->new_group({1, 0}) : world->new_group({0, 1});
      int sp = 1 - sub->rank();
      int32_t out = 40 + c.rank, got = -1;
      auto rw = sub->irecv(Tensor::of(&got, 1), sp);
      sub->send(Tensor::of(&out, 1), sp);
      rw->wait();
      EXPECT_EQ(got, 40 + peer);
      EXPECT_EQ(rw->source_rank(), sp);
      EXPECT_EQ(sub->global_rank(sp), peer);
      rw.reset();
      sub->destroy();
      int32_t wout = 7, win = -1;
      auto ww = world->irecv(Tensor::of(&win, 1), peer);
      world->send(Tensor::of(&wout, 1), peer);
      ww->wait();
      EXPECT_EQ(ww->source_rank(), peer);
    }
    world->destroy();
  });
  EXPECT_RANKS_OK(r);
}

}  // namespace
}  // namespace tpcomm::testing
