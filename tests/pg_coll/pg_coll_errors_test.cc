// Tier (b): bad input gives a clear error and no hang; ranks that disagree fail with
// MismatchError; a rank that dies mid-collective makes the others fail naming it.
#include <unistd.h>

#include "pg_coll/pg_coll_util.h"

namespace tpcomm::testing {
namespace {

using std::chrono::milliseconds;

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The same bad call on every rank: each gets InvalidArgument before communicating, and the
// group stays usable.
TEST(PgCollErrors, BadInputOnEveryRank) {
  auto r = run_ranks(2, [&](RankContext& ctx) {
    auto pg = make_world(ctx, "tcp", milliseconds(20000));
    std::vector<float> in(4, 1.0f), out(7);
    std::string e = error_of<InvalidArgument>(
        [&] { pg->all_gather_into_tensor(Tensor::of(out), Tensor::of(in)); });
    EXPECT_TRUE(has(e, "all_gather") && has(e, "output")) << e;

    std::vector<Tensor> short_list = {Tensor::of(out)};
    e = error_of<InvalidArgument>([&] { pg->all_gather(short_list, Tensor::of(in)); });
    EXPECT_TRUE(has(e, "1 tensors") || has(e, "one tensor per rank")) << e;

    e = error_of<InvalidArgument>([&] { pg->broadcast(Tensor::of(in), 5); });
    EXPECT_TRUE(has(e, "broadcast") && has(e, "5")) << e;
    e = error_of<InvalidArgument>([&] { pg->reduce(Tensor::of(in), -1); });
    EXPECT_TRUE(has(e, "reduce") && has(e, "-1")) << e;
    e = error_of<InvalidArgument>([&] { tpcomm::broadcast(Tensor::of(in), 9, pg); });
    EXPECT_TRUE(has(e, "9") && has(e, "not a member")) << e;

    e = error_of<InvalidArgument>([&] { pg->all_reduce(Tensor::of(in), ReduceOp::BXOR); });
    EXPECT_TRUE(has(e, "BXOR") && has(e, "float32")) << e;

    std::vector<int32_t> a(6), b(6);
    e = error_of<InvalidArgument>([&] {
      pg->all_to_all_single(Tensor::of(b), Tensor::of(a), {3, 3}, {2, 2});
    });
    EXPECT_TRUE(has(e, "split")) << e;

    // Still usable.
    pg->all_reduce(Tensor::of(in));
    EXPECT_EQ(in[0], 2.0f);
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

// Split sizes that are valid locally but disagree between ranks: MismatchError on every rank
// before any data moves; the group stays usable. Same for all_to_all lists.
TEST(PgCollErrors, MismatchedSplitSizes) {
  for (std::string t : {"tcp", "shm"}) {
    auto r = run_ranks(3, [&](RankContext& ctx) {
      auto pg = make_world(ctx, t, milliseconds(20000));
      const int me = pg->rank();
      std::vector<int32_t> in(6, me), out(6, -1);
      // Rank 1 expects 3 elements from rank 0, which sends it 2.
      std::vector<int64_t> in_splits = {2, 2, 2};
      std::vector<int64_t> out_splits = me == 1 ? std::vector<int64_t>{3, 1, 2} : in_splits;
      std::string e = error_of<MismatchError>(
          [&] { pg->all_to_all_single(Tensor::of(out), Tensor::of(in), out_splits, in_splits); });
      EXPECT_TRUE(has(e, "all_to_all_single")) << e;
      if (me == 1) {
        EXPECT_TRUE(has(e, "rank 0 sends 8 bytes to rank 1, which expects 12")) << e;
      } else {
        EXPECT_TRUE(has(e, "rank 1")) << e;
      }
      EXPECT_EQ(out[0], -1);  // no data moved

      std::vector<std::vector<float>> bufs(6, std::vector<float>(me == 2 ? 5 : 4));
      std::vector<Tensor> ins, outs;
      for (int j = 0; j < 3; ++j) {
        ins.push_back(Tensor::of(bufs[j]));
        outs.push_back(Tensor::of(bufs[3 + j]));
      }
      e = error_of<MismatchError>([&] { pg->all_to_all(outs, ins); });
      EXPECT_TRUE(has(e, "all_to_all")) << e;

      std::vector<float> x(3, 1.0f);
      pg->all_reduce(Tensor::of(x));
      EXPECT_EQ(x[2], 3.0f);
      pg->destroy();
    });
    EXPECT_RANKS_OK(r) << t;
  }
}

// Different sizes in an all_reduce: both ranks fail with MismatchError (or, for a rank whose
// peer already gave up, an error naming it) within the timeout; the group then refuses
// collectives with a message saying why.
TEST(PgCollErrors, SizeDisagreementAndAsymmetricBadInput) {
  auto r = run_ranks(2, [&](RankContext& ctx) {
    auto pg = make_world(ctx, "tcp", milliseconds(3000));
    const int me = pg->rank();
    std::vector<float> v(me == 0 ? 10 : 12, 1.0f);
    CollectiveOptions o;
    o.algorithm = "ring";
    auto t0 = std::chrono::steady_clock::now();
    std::string e = error_of<Error>([&] { pg->all_reduce(Tensor::of(v), ReduceOp::SUM, o); });
    EXPECT_FALSE(e.empty());
    EXPECT_TRUE(has(e, "bytes")) << e;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
    e = error_of<AbortedError>([&] { pg->barrier(); });
    EXPECT_TRUE(has(e, "unusable")) << e;
    // A fresh group works.
    auto g = pg->new_group({0, 1});
    std::vector<float> w(5, 1.0f);
    g->all_reduce(Tensor::of(w));
    EXPECT_EQ(w[4], 2.0f);

    // Only rank 0 passes a bad output: it fails at once; rank 1 fails naming rank 0.
    std::vector<float> in(4, 1.0f), out(me == 0 ? 7 : 8);
    CollectiveOptions shortly;
    shortly.timeout = milliseconds(1500);
    if (me == 0) {
      e = error_of<InvalidArgument>(
          [&] { g->all_gather_into_tensor(Tensor::of(out), Tensor::of(in), shortly); });
      EXPECT_TRUE(has(e, "output")) << e;
    } else {
      // TimeoutError, or PeerError when rank 0 has already left: either names rank 0.
      e = error_of<Error>(
          [&] { g->all_gather_into_tensor(Tensor::of(out), Tensor::of(in), shortly); });
      EXPECT_TRUE(has(e, "all_gather_into_tensor") && has(e, "rank 0")) << e;
    }
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

// A rank that exits mid-run: the survivors' next collective fails naming it, well within the
// group timeout.
void dies(const std::string& t) {
  RunOptions ro;
  ro.may_die = {2};
  auto r = run_ranks(
      3,
      [&](RankContext& ctx) {
        auto pg = make_world(ctx, t, milliseconds(4000));
        std::vector<float> v(1000, 1.0f);
        pg->all_reduce(Tensor::of(v));  // every link in use
        pg->barrier();
        if (pg->rank() == 2) _exit(0);
        auto t0 = std::chrono::steady_clock::now();
        std::string e = error_of<Error>([&] {
          for (int k = 0; k < 3; ++k) pg->all_reduce(Tensor::of(v));
        });
        EXPECT_TRUE(has(e, "rank 2")) << e;
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30)) << e;
        pg->destroy();
      },
      ro);
  EXPECT_RANKS_OK(r);
}

TEST(PgCollErrors, RankDiesOverTcp) { dies("tcp"); }
TEST(PgCollErrors, RankDiesOverShm) { dies("shm"); }

}  // namespace
}  // namespace tpcomm::testing

namespace tpcomm::testing {
namespace {

// A collective call's state on the world group's engine, as coll_run sets it up, for driving
// EngineComm directly.
::tpcomm::detail::CollCall engine_call(ProcessGroup& pg, uint64_t seq, const char* op) {
  auto& g = pg.state();
  ::tpcomm::detail::CollCall call;
  call.engine = g.world->engine;
  call.channel = &::tpcomm::detail::coll_state(g).channel;
  call.group_name = g.info.name;
  call.rank = g.rank;
  call.seq = seq;
  call.op = op;
  call.deadline = Deadline::after(milliseconds(20000));
  return call;
}

// The CollComm contract on the engine: destroying a pending receive cancels it, the engine
// never writes its buffer afterwards, and the message it would have matched goes to the next
// receive of that channel (eager and rendezvous sizes).
TEST(PgCollEngineComm, DestroyedReceiveIsCancelled) {
  auto r = run_ranks(2, [&](RankContext& ctx) {
    auto pg = make_world(ctx, "tcp", milliseconds(20000));
    ::tpcomm::detail::CollCall call = engine_call(*pg, 3, "cancel_test");
    ::tpcomm::detail::EngineComm comm(call);
    for (size_t bytes : {size_t(64), size_t(1) << 20}) {
      std::vector<uint8_t> out(bytes, 0x5A), first(bytes, 0xAA), second(bytes, 0);
      if (pg->rank() == 1) {
        { coll::Request gone = comm.irecv(first.data(), bytes, 0, 999); }  // cancelled here
        pg->barrier();  // rank 0 sends after this
        coll::Request next = comm.irecv(second.data(), bytes, 0, 999);
        comm.wait(next);
        EXPECT_EQ(second, out) << bytes;
        EXPECT_EQ(first, std::vector<uint8_t>(bytes, 0xAA))
            << bytes << ": cancelled buffer written";
      } else {
        pg->barrier();
        coll::Request s = comm.isend(out.data(), bytes, 1, 999);
        comm.wait(s);
      }
      pg->barrier();
    }
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

// A receive that gets fewer bytes than it posted fails with MismatchError naming both ranks
// and sizes; the engine requests are recycled per thread (their Ops too), so many exchanges on
// one EngineComm, a cancelled receive among them, keep their data and their order.
TEST(PgCollEngineComm, ShortReceiveNamesSizesAndRequestsRecycle) {
  auto r = run_ranks(2, [&](RankContext& ctx) {
    auto pg = make_world(ctx, "tcp", milliseconds(20000));
    ::tpcomm::detail::CollCall call = engine_call(*pg, 5, "recycle_test");
    ::tpcomm::detail::EngineComm comm(call);
    const int me = pg->rank(), peer = 1 - me;
    for (int i = 0; i < 300; ++i) {
      int64_t mine = me * 1000 + i, theirs = -1;
      coll::Request rq = comm.irecv(&theirs, sizeof theirs, peer, 7);
      coll::Request sq = comm.isend(&mine, sizeof mine, peer, 7);
      if (i == 100) {
        coll::Request gone = comm.irecv(&theirs, 0, peer, 8);  // never matched: cancelled
      }
      comm.wait(rq);
      comm.wait(sq);
      ASSERT_EQ(theirs, peer * 1000 + i);
    }
    std::vector<uint8_t> buf(16, 0);
    if (me == 1) {
      coll::Request rq = comm.irecv(buf.data(), 16, 0, 9);
      std::string e = error_of<MismatchError>([&] { comm.wait(rq); });
      EXPECT_TRUE(has(e, "recycle_test #5") && has(e, "receive from rank 0") &&
                  has(e, "rank 0 sent 8 bytes, rank 1 expected 16"))
          << e;
    } else {
      coll::Request sq = comm.isend(buf.data(), 8, 1, 9);
      comm.wait(sq);
    }
    pg->barrier();
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

}  // namespace
}  // namespace tpcomm::testing
