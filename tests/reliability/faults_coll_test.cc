// Fault injection in collectives (issue: never hang silently): a rank killed with SIGKILL
// during an all_reduce loop fails every survivor quickly, naming it and its host, and the
// survivors build a new 3-rank world through the same store; ranks that call different
// collectives, or a rank that never calls, give every caller a bounded error that names the
// operation, its sequence number and the ranks involved.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/multiproc.h"
#include "core/log.h"
#include "tpcomm/collectives.hpp"
#include "tpcomm/tpcomm.hpp"

namespace tpcomm::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The message of the tpcomm::Error `f` throws ("(no error)" if none).
template <class F>
std::string any_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a tpcomm::Error: ") + e.what();
  }
  return "(no error)";
}

// The TimeoutError of one all_reduce.
std::string error_of_timeout(ProcessGroup& pg, std::vector<float>& v) {
  try {
    pg.all_reduce(Tensor::of(v));
  } catch (const TimeoutError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a TimeoutError: ") + e.what();
  }
  return "(no error)";
}

int64_t now_ns() { return Clock::now().time_since_epoch().count(); }

// Each rank on its own "host" (tcp between them): errors must name the host.
RunOptions per_host(std::map<std::string, std::string> env = {}) {
  RunOptions opt;
  opt.env = std::move(env);
  opt.rank_env = [](int rank) {
    return std::map<std::string, std::string>{{"TPCOMM_HOSTID", "node" + std::to_string(rank)}};
  };
  opt.timeout = milliseconds(90000);
  return opt;
}

std::shared_ptr<ProcessGroup> world(RankContext& c, std::shared_ptr<Store> store, int rank,
                                    int size, milliseconds timeout) {
  InitOptions o;
  o.timeout = timeout;
  return ProcessGroup::create(std::move(store), rank, size, o);
}

// kill -9 of one of 4 ranks in an all_reduce loop: every survivor errors within 10 s naming
// the rank and its host, then the three survivors make a new world and all_reduce in it.
TEST(KillDuringAllReduce, SurvivorsErrorNamingItAndRegroup) {
  // Lazy connections (the default): only the victim's neighbours in the algorithm hold a
  // link to it; the others learn of its death from their notice in the group's store.
  RunOptions opt = per_host();
  opt.may_die = {3};
  auto r = run_ranks(
      4,
      [&](RankContext& c) {
        auto pg = world(c, c.store, c.rank, 4, seconds(60));
        std::vector<float> v(256);
        std::string err;
        int64_t failed_at = 0;
        for (int it = 0; it < 100000 && err.empty(); ++it) {
          if (c.rank == 3 && it == 20) {
            c.store->set("killed_at", std::to_string(now_ns()));
            raise(SIGKILL);
          }
          std::fill(v.begin(), v.end(), 1.0f);
          err = any_error([&] { pg->all_reduce(Tensor::of(v)); });
          if (err == "(no error)") {
            EXPECT_EQ(v[0], 4.0f);
            err.clear();
          } else {
            failed_at = now_ns();
          }
        }
        ASSERT_FALSE(err.empty());
        int64_t killed_at = std::stoll(c.store->get_string("killed_at"));
        EXPECT_LT(failed_at - killed_at, int64_t(10) * 1000000000) << err;
        EXPECT_TRUE(contains(err, "global rank 3") || contains(err, "rank 3 ")) << err;
        EXPECT_TRUE(contains(err, "node3")) << err;
        EXPECT_TRUE(contains(err, "all_reduce #")) << err;
        pg->destroy();

        // The survivors regroup through the same store, under a fresh prefix.
        auto store = std::make_shared<PrefixStore>("survivors", c.store);
        auto pg3 = world(c, store, c.rank, 3, seconds(60));
        std::vector<int32_t> x(1000, c.rank + 1);
        pg3->all_reduce(Tensor::of(x));
        EXPECT_EQ(x[0], 6);
        EXPECT_EQ(x[999], 6);
        pg3->destroy();
      },
      opt);
  EXPECT_RANKS_OK(r);
}

// Two ranks call all_reduce while two call broadcast: every rank gets a MismatchError (no
// hang, no timeout) naming its operation, its sequence number and both calls; the ranks that
// hold messages of the other call (the signature in the collectives' tags keeps them from
// matching) find it themselves and post a notice in the group's store that the others read
// at their next check.
TEST(MismatchedCollectives, AllReduceAgainstBroadcast) {
  auto r = run_ranks(
      4,
      [&](RankContext& c) {
        auto pg = world(c, c.store, c.rank, 4, seconds(6));
        std::vector<float> v(64, 1.0f);
        auto start = Clock::now();
        std::string err = "(no error)";
        try {
          if (c.rank < 2)
            pg->all_reduce(Tensor::of(v));
          else
            pg->broadcast(Tensor::of(v), 0);
        } catch (const MismatchError& e) {
          err = std::string("MismatchError: ") + e.what();
        } catch (const Error& e) {
          err = e.what();
        }
        EXPECT_LT(Clock::now() - start, seconds(5)) << err;  // before the 6 s deadline
        EXPECT_TRUE(contains(err, "MismatchError: ")) << err;
        EXPECT_TRUE(contains(err, c.rank < 2 ? "all_reduce #0" : "broadcast #0")) << err;
        EXPECT_TRUE(contains(err, "the ranks disagree")) << err;
        EXPECT_TRUE(contains(err, "called all_reduce") || contains(err, "called broadcast")) << err;
        EXPECT_TRUE(contains(err, "all_reduce") && contains(err, "broadcast")) << err;
        TPLOG(INFO, COLL) << "rank " << c.rank << ": " << err;
        c.store->set("err/" + std::to_string(c.rank), err);
        c.store->wait({"err/0", "err/1", "err/2", "err/3"});
        std::string all;
        for (int i = 0; i < 4; ++i) all += c.store->get_string("err/" + std::to_string(i));
        EXPECT_TRUE(contains(all, "MismatchError")) << all;
        EXPECT_TRUE(contains(all, "called all_reduce") || contains(all, "called broadcast")) << all;
        pg->destroy();
      },
      per_host());
  EXPECT_RANKS_OK(r);
}

// The same on one host, where the collectives run on shared memory (shm_direct) without
// messages: each rank publishes what it called next to its steps, a rank waiting on a peer's
// step compares the calls, and a rank that finds a mismatch poisons its counters so that
// every rank waiting on it fails at once too. Every rank gets a MismatchError naming both
// calls, well before the deadline. With 64 elements the calls meet in the small slots; with 2
// (8 bytes) an all_reduce uses the slots all ranks share in one line, where a broadcast uses
// the small slots: a rank waiting on one counter sees its peer's step on the other.
TEST(MismatchedCollectives, OnOneHostSharedMemory) {
  for (int variant = 0; variant < 4; ++variant) {
    const size_t n = variant < 2 ? 64 : 2;
    const std::string f32 = "float32[" + std::to_string(n) + "]";
    const std::string i32 = "int32[" + std::to_string(n) + "]";
    RunOptions opt;
    opt.timeout = milliseconds(90000);
    auto r = run_ranks(
        4,
        [&](RankContext& c) {
          auto pg = world(c, c.store, c.rank, 4, seconds(8));
          std::vector<float> v(n, 1.0f);
          std::vector<int32_t> iv(n, 1);
          pg->barrier();  // the shared-memory path is set up; both calls below use it
          auto start = Clock::now();
          std::string err = "(no error)";
          try {
            if (c.rank < 2)
              pg->all_reduce(Tensor::of(v));
            else if (variant % 2 == 0)
              pg->broadcast(Tensor::of(v), 0);
            else
              pg->all_reduce(Tensor::of(iv));
          } catch (const MismatchError& e) {
            err = std::string("MismatchError: ") + e.what();
          } catch (const Error& e) {
            err = e.what();
          }
          EXPECT_LT(Clock::now() - start, seconds(6)) << err;  // before the 8 s deadline
          EXPECT_TRUE(contains(err, "MismatchError: ")) << err;
          EXPECT_TRUE(contains(err, "shm_direct")) << err;
          EXPECT_TRUE(contains(err, "all_reduce(" + f32 + ", sum)")) << err;
          // Between them the ranks' errors name both calls.
          std::string key = "err" + std::to_string(variant) + "/";
          c.store->set(key + std::to_string(c.rank), err);
          c.store->wait({key + "0", key + "1", key + "2", key + "3"});
          std::string all;
          for (int k = 0; k < 4; ++k) all += c.store->get_string(key + std::to_string(k));
          EXPECT_TRUE(contains(all, variant % 2 == 0 ? "broadcast(" + f32 + ", root 0)"
                                                     : "all_reduce(" + i32 + ", sum)"))
              << all;
          // The group's shared-memory collectives are unusable now: a clear error, no hang.
          std::string later;
          try {
            pg->all_reduce(Tensor::of(v));
          } catch (const Error& e) {
            later = e.what();
          }
          EXPECT_FALSE(later.empty());
          pg->destroy();
        },
        opt);
    EXPECT_RANKS_OK(r);
  }
}

// Same operation, same byte count, different dtype (float32 against int32): the argument
// hash in the tags keeps the calls apart, so nothing is silently reduced across dtypes; every
// rank gets a MismatchError (found, or read from another's notice).
TEST(MismatchedCollectives, SameOperationDifferentDType) {
  auto r = run_ranks(
      4,
      [&](RankContext& c) {
        auto pg = world(c, c.store, c.rank, 4, seconds(4));
        std::vector<float> f(64, 1.0f);
        std::vector<int32_t> i(64, 1);
        std::string err = "(no error)";
        try {
          if (c.rank < 2)
            pg->all_reduce(Tensor::of(f));
          else
            pg->all_reduce(Tensor::of(i));
        } catch (const MismatchError& e) {
          err = std::string("MismatchError: ") + e.what();
        } catch (const Error& e) {
          err = e.what();
        }
        EXPECT_TRUE(contains(err, "MismatchError: ")) << err;
        EXPECT_TRUE(contains(err, "all_reduce #0")) << err;
        EXPECT_TRUE(contains(err, "with other arguments")) << err;
        c.store->set("err/" + std::to_string(c.rank), err);
        c.store->wait({"err/0", "err/1", "err/2", "err/3"});
        std::string all;
        for (int k = 0; k < 4; ++k) all += c.store->get_string("err/" + std::to_string(k));
        EXPECT_TRUE(contains(all, "with other arguments")) << all;
        pg->destroy();
      },
      per_host());
  EXPECT_RANKS_OK(r);
}

// The list forms are signed too: an all_gather of int32 against one of float32 (same byte
// count) fails on both ranks with a MismatchError instead of mixing the bytes.
TEST(MismatchedCollectives, ListFormDifferentDType) {
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = world(c, c.store, c.rank, 2, seconds(4));
        std::vector<float> f(16, 1.0f), fo(32);
        std::vector<int32_t> i(16, 1), io(32);
        std::string err = "(no error)";
        try {
          if (c.rank == 0)
            pg->all_gather({Tensor::of(fo.data(), 16), Tensor::of(fo.data() + 16, 16)},
                           Tensor::of(f));
          else
            pg->all_gather({Tensor::of(io.data(), 16), Tensor::of(io.data() + 16, 16)},
                           Tensor::of(i));
        } catch (const MismatchError& e) {
          err = std::string("MismatchError: ") + e.what();
        } catch (const Error& e) {
          err = e.what();
        }
        EXPECT_TRUE(contains(err, "MismatchError: ")) << err;
        EXPECT_TRUE(contains(err, "all_gather #0")) << err;
        EXPECT_TRUE(contains(err, "with other arguments")) << err;
        c.store->set("err/" + std::to_string(c.rank), err);
        c.store->wait({"err/0", "err/1"});
        pg->destroy();
      },
      per_host());
  EXPECT_RANKS_OK(r);
}

// all_to_all_single with the same byte count but different dtypes (float32 against int32):
// the dtype is in the signature (the counts may differ per rank there), so both ranks fail
// with a MismatchError naming the dtypes instead of exchanging the bytes.
TEST(MismatchedCollectives, AllToAllDifferentDType) {
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = world(c, c.store, c.rank, 2, seconds(4));
        std::vector<float> f(16, 1.0f), fo(16);
        std::vector<int32_t> i(16, 1), io(16);
        std::string err = "(no error)";
        try {
          if (c.rank == 0)
            pg->all_to_all_single(Tensor::of(fo), Tensor::of(f));
          else
            pg->all_to_all_single(Tensor::of(io), Tensor::of(i));
        } catch (const MismatchError& e) {
          err = std::string("MismatchError: ") + e.what();
        } catch (const Error& e) {
          err = e.what();
        }
        EXPECT_TRUE(contains(err, "MismatchError: ")) << err;
        EXPECT_TRUE(contains(err, "all_to_all_single #0")) << err;
        c.store->set("err/" + std::to_string(c.rank), err);
        c.store->wait({"err/0", "err/1"});
        std::string all = c.store->get_string("err/0") + c.store->get_string("err/1");
        // The rank that finds it names its own dtype (it has only the peer's hash).
        EXPECT_TRUE(contains(all, "all_to_all_single(int32)") ||
                    contains(all, "all_to_all_single(float32)"))
            << all;
        pg->destroy();
      },
      per_host());
  EXPECT_RANKS_OK(r);
}

// One rank never calls: the others' all_reduce times out; the errors name the operation,
// its sequence number, and between them the rank that never came.
TEST(MissingRank, TimeoutNamesOperationSequenceAndRank) {
  auto r = run_ranks(
      4,
      [&](RankContext& c) {
        auto pg = world(c, c.store, c.rank, 4, seconds(3));
        std::vector<float> v(64, 1.0f);
        // A first collective that completes: the failing one is #1.
        pg->all_reduce(Tensor::of(v));
        if (c.rank == 3) {
          c.store->wait({"err/0", "err/1", "err/2"}, seconds(60));
          std::string all;
          for (int i = 0; i < 3; ++i) all += c.store->get_string("err/" + std::to_string(i));
          EXPECT_TRUE(contains(all, "rank 3")) << all;
          pg->destroy();
          return;
        }
        std::string err = error_of_timeout(*pg, v);
        EXPECT_TRUE(contains(err, "all_reduce #1")) << err;
        EXPECT_TRUE(contains(err, "timed out")) << err;
        c.store->set("err/" + std::to_string(c.rank), err);
        // Nobody leaves before every caller has timed out by itself (a destroyed group is a
        // lost member for the others).
        c.store->wait({"err/0", "err/1", "err/2"});
        pg->destroy();
      },
      per_host());
  EXPECT_RANKS_OK(r);
}

}  // namespace
}  // namespace tpcomm::testing
