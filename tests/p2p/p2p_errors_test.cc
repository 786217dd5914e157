// Tier (b): bad input gets a clear error, nothing hangs, and the group stays usable; dead
// peers fail pending operations naming the rank; timeouts say what they waited for.
#include <netinet/in.h>
#include <sys/socket.h>

#include "net/socket.h"
#include "p2p/p2p_test_util.h"
#include "transports/tcp/wire.h"

namespace tpcomm::testing {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// One normal exchange: proves the group is still usable.
void ping(ProcessGroup& pg) {
  int32_t x = pg.rank(), y = -1;
  auto rw = pg.irecv(Tensor::of(&y, 1), 1 - pg.rank(), 77);
  pg.send(Tensor::of(&x, 1), 1 - pg.rank(), 77);
  rw->wait();
  EXPECT_EQ(y, 1 - pg.rank());
}

class Errors : public ::testing::TestWithParam<std::string> {};

TEST_P(Errors, BadInputIsRejectedAndTheGroupStaysUsable) {
  std::string tr = GetParam();
  auto r = run_ranks(2, [&](RankContext& c) {
    auto pg = make_world(c, tr);
    int me = pg->rank(), peer = 1 - me;
    int32_t v = 0;
    // Ranks out of range, and oneself.
    EXPECT_TRUE(contains(error_of<InvalidArgument>([&] { pg->send(Tensor::of(&v, 1), 2); }),
                         "rank 2 is out of range for group 'default_pg' of size 2"));
    EXPECT_TRUE(contains(error_of<InvalidArgument>([&] { pg->isend(Tensor::of(&v, 1), -3); }),
                         "out of range"));
    EXPECT_TRUE(contains(error_of<InvalidArgument>([&] { pg->irecv(Tensor::of(&v, 1), 5); }),
                         "out of range"));
    EXPECT_TRUE(contains(error_of<InvalidArgument>([&] { pg->send(Tensor::of(&v, 1), me); }),
                         "cannot communicate with itself"));
    ping(*pg);

    // Two receives into the same buffer.
    std::vector<int32_t> buf(16);
    auto first = pg->irecv(Tensor::of(buf), peer, 1);
    EXPECT_TRUE(contains(error_of<InvalidArgument>([&] {
                           pg->irecv(Tensor::raw(buf.data() + 4, 4, DType::Int32), peer, 2);
                         }),
                         "overlaps the buffer of a pending recv from rank"));
    // Both checks are done before either message is sent (else `first` may complete at once).
    c.store->set("overlap/" + std::to_string(me), "1");
    c.store->wait({"overlap/0", "overlap/1"});
    std::vector<int32_t> out(16, me);
    pg->send(Tensor::of(out), peer, 1);
    first->wait();
    EXPECT_EQ(buf[15], peer);
    ping(*pg);

    // Receive buffer smaller than the message: eager and rendezvous sizes.
    for (size_t n : {size_t(8), size_t(100000)}) {
      std::vector<int32_t> big(n, 1), small(n / 2);
      if (me == 0) {
        auto w = pg->isend(Tensor::of(big), 1, 3);
        std::string err = error_of<InvalidArgument>([&] { w->wait(); });
        if (n > 1000) {  // the rendezvous sender learns about it too
          EXPECT_TRUE(contains(err, "refused the message")) << err;
        }
      } else {
        auto w = pg->irecv(Tensor::of(small), 0, 3);
        std::string err = error_of<InvalidArgument>([&] { w->wait(); });
        EXPECT_TRUE(contains(
            err, "more than the " + std::to_string(n / 2 * 4) + "-byte receive buffer holds"))
            << err;
        EXPECT_FALSE(w->is_success());
        EXPECT_TRUE(w->exception() != nullptr);
      }
      ping(*pg);
    }

    // Dtype mismatch: eager and rendezvous.
    for (size_t n : {size_t(4), size_t(100000)}) {
      if (me == 0) {
        std::vector<float> f(n, 1.f);
        auto w = pg->isend(Tensor::of(f), 1, 4);
        if (n > 1000) {
          EXPECT_TRUE(contains(error_of<MismatchError>([&] { w->wait(); }), "dtypes differ"));
        } else {
          w->wait();
        }
      } else {
        std::vector<int32_t> i(n);
        auto w = pg->irecv(Tensor::of(i), 0, 4);
        std::string err = error_of<MismatchError>([&] { w->wait(); });
        EXPECT_TRUE(contains(err, "rank 0 sent float32[" + std::to_string(n) + "]")) << err;
      }
      ping(*pg);
    }

    // A timeout says what it waited for; the group still works afterwards.
    if (me == 1) {
      int32_t never = 0;
      auto w = pg->irecv(Tensor::of(&never, 1), 0, 12345);
      std::string err = error_of<TimeoutError>([&] { w->wait(std::chrono::milliseconds(300)); });
      EXPECT_TRUE(contains(err, "did not complete within")) << err;
      EXPECT_TRUE(contains(err, "no matching message from rank 0")) << err;
      // Satisfy it, so that the buffer is released.
      int32_t go = 1;
      pg->send(Tensor::of(&go, 1), 0, 500);
      w->wait();
    } else {
      int32_t go = 0;
      pg->recv(Tensor::of(&go, 1), 1, 500);
      int32_t late = 5;
      pg->send(Tensor::of(&late, 1), 1, 12345);
    }
    ping(*pg);

    // Calls on a destroyed group.
    pg->destroy();
    EXPECT_TRUE(contains(error_of<InvalidArgument>([&] { pg->send(Tensor::of(&v, 1), peer); }),
                         "was destroyed"));
    EXPECT_TRUE(contains(error_of<InvalidArgument>([&] { pg->irecv(Tensor::of(&v, 1), peer); }),
                         "was destroyed"));
  });
  EXPECT_RANKS_OK(r);
}

// A rank that dies (kill -9, no goodbye) fails the pending operations of its peers.
TEST_P(Errors, DeadPeerFailsPendingWorkNamingTheRank) {
  std::string tr = GetParam();
  RunOptions opt;
  opt.may_die = {1};
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = make_world(c, tr);
        ping(*pg);
        if (c.rank == 1) {
          c.store->wait({"posted"});
          raise(SIGKILL);
        }
        std::vector<float> buf(100000);
        auto w = pg->irecv(Tensor::of(buf), 1, 9);
        c.store->set("posted", "1");
        std::string err = error_of<PeerError>([&] { w->wait(std::chrono::seconds(30)); });
        EXPECT_TRUE(contains(err, "rank 1")) << err;
        // Later calls to it fail at once; the error names the rank.
        EXPECT_TRUE(contains(error_of<PeerError>([&] {
                               int32_t x = 0;
                               pg->send(Tensor::of(&x, 1), 1);
                             }),
                             "rank 1 is dead"));
        pg->destroy();
      },
      opt);
  EXPECT_RANKS_OK(r);
}

INSTANTIATE_TEST_SUITE_P(P2P, Errors, ::testing::ValuesIn(p2p_transports()),
                         [](const auto& info) { return info.param; });

// Unknown backends and bad init arguments.
TEST(ErrorsInit, BadBackendAndArguments) {
  auto store = std::make_shared<HashStore>();
  InitOptions o;
  o.backend = "carrier-pigeon";
  EXPECT_TRUE(contains(error_of<InvalidArgument>([&] { ProcessGroup::create(store, 0, 1, o); }),
                       "unknown backend 'carrier-pigeon'"));
  EXPECT_TRUE(contains(error_of<InvalidArgument>([&] { ProcessGroup::create(store, 3, 2); }),
                       "need 0 <= rank < world_size"));
  EXPECT_TRUE(contains(error_of<InvalidArgument>([&] { get_rank(); }), "not initialized"));
  InitOptions s;
  s.store = store;
  EXPECT_TRUE(contains(error_of<InvalidArgument>([&] { init_process_group(s); }),
                       "rank and world_size must be given"));
}

// The tcp listener refuses connections of another job or meant for another rank, and keeps
// working.
TEST(ErrorsTcp, StrayConnectionsAreRefused) {
  auto r = run_ranks(2, [&](RankContext& c) {
    auto pg = make_world(c, "tcp");
    ping(*pg);
    if (c.rank == 1) {
      // Rank 0's published tcp address.
      Bytes a = c.store->get("tpcomm/1/p2p/link/tcp/0");
      ASSERT_GT(a.size(), 1u);
      auto [host, port] = net::split_host_port(std::string(a.begin() + 1, a.end()));
      for (int variant = 0; variant < 3; ++variant) {
        net::Fd fd = net::connect_to(host, port, Deadline::after(std::chrono::seconds(10)));
        std::vector<uint8_t> hello;
        if (variant == 0) {
          hello.assign(64, 'x');  // not tpcomm at all
        } else {
          // magic, version, nsocks 1, index 0, job length, src, dst, world size, job
          std::string job = variant == 1 ? "other-job" : "default";
          int32_t src = 1, dst = variant == 2 ? 5 : 0, ws = 2;
          uint32_t magic = 0x54504354;
          uint16_t ver = tcp::kWireVersion, ns = 1, idx = 0, jl = static_cast<uint16_t>(job.size());
          auto put = [&](const void* p, size_t n) {
            hello.insert(hello.end(), static_cast<const uint8_t*>(p),
                         static_cast<const uint8_t*>(p) + n);
          };
          put(&magic, 4), put(&ver, 2), put(&ns, 2), put(&idx, 2), put(&jl, 2);
          put(&src, 4), put(&dst, 4), put(&ws, 4), put(job.data(), job.size());
        }
        net::write_all(fd.get(), hello.data(), hello.size(),
                       Deadline::after(std::chrono::seconds(10)), "rank 0");
        // The answer (if any) ends with the connection closed.
        std::string answer;
        char buf[1024];
        ssize_t n;
        while ((n = ::recv(fd.get(), buf, sizeof buf, 0)) > 0) answer.append(buf, n);
        if (variant == 1) {
          EXPECT_TRUE(contains(answer, "job id 'other-job' differs")) << answer;
        }
        if (variant == 2) {
          EXPECT_TRUE(contains(answer, "it wants rank 5")) << answer;
        }
      }
    }
    c.store->set("probed/" + std::to_string(c.rank), "1");
    c.store->wait({"probed/0", "probed/1"});
    ping(*pg);
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

}  // namespace
}  // namespace tpcomm::testing
