// The latency path of blocking collectives (8-byte all_reduce): the group's run lock
// (coll_run.h RunLock) excludes and wakes its waiters; a blocking call's Work (shared, no
// reference count) reads completed and stays valid when kept; async all_reduce keeps its
// own copies of the arguments, and a forced algorithm still reaches the call.
#include <atomic>
#include <mutex>
#include <thread>

#include "pg_coll/pg_coll_util.h"

namespace tpcomm::testing {
namespace {

using std::chrono::milliseconds;
using RunLock = ::tpcomm::detail::RunLock;

TEST(PgCollFastPath, RunLockExcludes) {
  RunLock lock;
  int64_t counter = 0;  // plain: the lock alone orders the increments
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        std::lock_guard<RunLock> g(lock);
        ++counter;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, 4 * 20000);
}

TEST(PgCollFastPath, RunLockWaiterSleepsThenEnters) {
  RunLock lock;
  std::atomic<bool> entered{false};
  lock.lock();
  std::thread waiter([&] {
    std::lock_guard<RunLock> g(lock);
    entered = true;
  });
  // Long enough for the waiter to pass its spin and yields into the sleeping steps.
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_FALSE(entered.load());
  lock.unlock();
  waiter.join();
  EXPECT_TRUE(entered.load());
}

TEST(PgCollFastPath, BlockingWorkAsyncCopiesForcedAlgorithm) {
  auto r = run_ranks(2, [&](RankContext& ctx) {
    auto pg = make_world(ctx, "shm", milliseconds(30000));
    float v[2] = {static_cast<float>(ctx.rank + 1), 10.0f};
    std::shared_ptr<Work> kept = pg->all_reduce(Tensor::of(v, 2));
    EXPECT_EQ(v[0], 3.0f);
    EXPECT_EQ(v[1], 20.0f);
    // The blocking calls' Work: completed, successful, kept across further calls.
    for (int i = 0; i < 100; ++i) pg->all_reduce(Tensor::of(v, 2));
    ASSERT_TRUE(kept);
    EXPECT_TRUE(kept->is_completed());
    EXPECT_TRUE(kept->is_success());
    EXPECT_TRUE(kept->wait());
    EXPECT_EQ(kept->exception(), nullptr);
    std::shared_ptr<Work> copy = kept;
    kept.reset();
    EXPECT_TRUE(copy->is_completed());

    // async_op: the options and tensor handle are copied; the caller's may go at once.
    float a[3] = {1, 2, 3};
    std::shared_ptr<Work> w;
    {
      CollectiveOptions o;
      o.async_op = true;
      o.algorithm = "";
      Tensor t = Tensor::of(a, 3);
      w = pg->all_reduce(t, ReduceOp::MAX, o);
    }
    EXPECT_TRUE(w->wait());
    EXPECT_EQ(a[0], 1.0f);
    EXPECT_EQ(a[2], 3.0f);

    // A forced algorithm still reaches the call (blocking form): the message-passing ring.
    CollectiveOptions forced;
    forced.algorithm = "ring";
    float b[4] = {1, 1, 1, 1};
    pg->all_reduce(Tensor::of(b, 4), ReduceOp::SUM, forced);
    EXPECT_EQ(b[3], 2.0f);
    EXPECT_EQ(last_algo(*pg), "ring");
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

}  // namespace
}  // namespace tpcomm::testing
