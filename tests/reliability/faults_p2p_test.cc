// Fault injection below the collectives (issue: never hang silently): a silent peer (stopped
// with SIGSTOP) is found by the heartbeat and named with its host; garbage and truncated
// frames on a tcp data connection and on the store port are refused without harm; a peer that
// accepts a connection but never answers fails the operations waiting on it. Every case is
// bounded by short timeouts.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/multiproc.h"
#include "core/config.h"
#include "net/socket.h"
#include "tpcomm/tpcomm.hpp"
#include "transports/tcp/wire.h"

namespace tpcomm::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "(no error)";
}

std::shared_ptr<ProcessGroup> world(RankContext& c, const std::string& backend,
                                    milliseconds timeout) {
  InitOptions o;
  o.backend = backend;
  o.timeout = timeout;
  return ProcessGroup::create(c.store, c.rank, c.world_size, o);
}

// One exchange between group ranks a and b (others do nothing).
void ping(ProcessGroup& pg, int a, int b) {
  int me = pg.rank();
  if (me != a && me != b) return;
  int peer = me == a ? b : a;
  int32_t x = me, y = -1;
  auto rw = pg.irecv(Tensor::of(&y, 1), peer, 77);
  pg.send(Tensor::of(&x, 1), peer, 77);
  rw->wait();
  EXPECT_EQ(y, peer);
}

// Short heartbeats for the tests: a silent peer is declared lost after 2 s.
std::map<std::string, std::string> beat_env() {
  return {{"TPCOMM_HEARTBEAT_INTERVAL", "200ms"}, {"TPCOMM_HEARTBEAT_TIMEOUT", "2s"}};
}

// A peer that stops answering (SIGSTOP: its sockets stay open, its process stays alive) fails
// the pending receive, and later sends, within the heartbeat timeout, naming rank and host:
// on another host by its missing heartbeats, on the same host by its stopped process.
class SilentPeer : public ::testing::TestWithParam<std::string> {};

TEST_P(SilentPeer, IsDeclaredLostByTheHeartbeatNamingRankAndHost) {
  RunOptions opt;
  opt.env = beat_env();
  opt.rank_env = [](int rank) {
    // Different host ids give tcp between the ranks; the same host keeps shm.
    std::string host = GetParam() == "tcp" ? "node" + std::to_string(rank) : "samehost";
    return std::map<std::string, std::string>{{"TPCOMM_HOSTID", host}};
  };
  opt.may_die = {1};
  opt.timeout = milliseconds(60000);
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = world(c, GetParam(), seconds(60));
        ping(*pg, 0, 1);
        if (c.rank == 1) {
          c.store->set("pid", std::to_string(getpid()));
          c.store->wait({"posted"});
          raise(SIGSTOP);  // silent from here on; rank 0 kills it
          for (;;) pause();
        }
        std::vector<float> buf(1000);
        auto w = pg->irecv(Tensor::of(buf), 1, 9);
        c.store->set("posted", "1");
        auto start = Clock::now();
        std::string err = error_of<PeerError>([&] { w->wait(seconds(30)); });
        auto took = Clock::now() - start;
        pid_t pid = static_cast<pid_t>(std::stol(c.store->get_string("pid")));
        kill(pid, SIGKILL);
        EXPECT_LT(took, seconds(15)) << err;  // 2 s timeout, generous for a loaded machine
        EXPECT_TRUE(contains(err, "rank 1")) << err;
        // Another host: its heartbeats stopped. The same host: its process is seen stopped.
        EXPECT_TRUE(contains(
            err, GetParam() == "tcp" ? "not even a heartbeat" : "is unresponsive: its process"))
            << err;
        EXPECT_TRUE(contains(err, GetParam() == "tcp" ? "host 'node1'" : "host 'samehost'")) << err;
        // Later operations that need it fail at once.
        int32_t x = 0;
        EXPECT_TRUE(
            contains(error_of<PeerError>([&] { pg->send(Tensor::of(&x, 1), 1); }), "rank 1"));
        pg->destroy();
      },
      opt);
  EXPECT_RANKS_OK(r);
}

INSTANTIATE_TEST_SUITE_P(Faults, SilentPeer, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });

// Heartbeats keep quiet but live peers alive: two ranks that exchange nothing for several
// heartbeat timeouts still communicate afterwards.
TEST(Heartbeat, QuietLivePeersStayConnected) {
  RunOptions opt;
  opt.env = beat_env();  // 2 s: generous on a loaded machine
  opt.rank_env = [](int rank) {
    return std::map<std::string, std::string>{{"TPCOMM_HOSTID", "node" + std::to_string(rank)}};
  };
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = world(c, "tcp", seconds(60));
        // Only rank 0 sends first: rank 1 learns of the link from the incoming connection.
        int32_t x = 5, y = 0;
        if (c.rank == 0) pg->send(Tensor::of(&x, 1), 1, 1);
        if (c.rank == 1) pg->recv(Tensor::of(&y, 1), 0, 1);
        std::this_thread::sleep_for(milliseconds(5000));  // 2.5 heartbeat timeouts
        ping(*pg, 0, 1);
        pg->destroy();
      },
      opt);
  EXPECT_RANKS_OK(r);
}

// A rank that starts late is not lost: ranks 0 and 1 (on hosts of their own, so heartbeats
// judge them) wait in init_process_group for rank 2, which starts 2.5 heartbeat timeouts
// after them; afterwards every pair still talks, so nobody declared a rank that was waiting
// in init, or still starting, lost.
TEST(Heartbeat, RanksWaitingForALateStarterAreNotLost) {
  RunOptions opt;
  opt.env = beat_env();  // 2 s
  opt.rank_env = [](int rank) {
    return std::map<std::string, std::string>{{"TPCOMM_HOSTID", "node" + std::to_string(rank)}};
  };
  auto r = run_ranks(
      3,
      [&](RankContext& c) {
        // The late start is the scenario itself, not a synchronisation.
        if (c.rank == 2) std::this_thread::sleep_for(milliseconds(5000));
        auto pg = world(c, "tcp", seconds(60));
        ping(*pg, 0, 1);
        ping(*pg, 1, 2);
        ping(*pg, 0, 2);
        pg->destroy();
      },
      opt);
  EXPECT_RANKS_OK(r);
}

// The tcp address rank `rank` published (world group of the first ProcessGroup::create).
std::pair<std::string, uint16_t> tcp_address(Store& store, int rank) {
  Bytes a = store.get("tpcomm/1/p2p/link/tcp/" + std::to_string(rank));
  EXPECT_GT(a.size(), 1u);
  return net::split_host_port(std::string(a.begin() + 1, a.end()));
}

std::vector<uint8_t> hello(int32_t src, int32_t dst, int32_t ws, const std::string& job) {
  std::vector<uint8_t> out;
  auto put = [&](const void* p, size_t n) {
    out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  uint32_t magic = 0x54504354;
  uint16_t ver = tcp::kWireVersion, ns = 1, idx = 0, jl = static_cast<uint16_t>(job.size());
  put(&magic, 4), put(&ver, 2), put(&ns, 2), put(&idx, 2), put(&jl, 2);
  put(&src, 4), put(&dst, 4), put(&ws, 4), put(job.data(), job.size());
  return out;
}

// Sends `bytes` on a new connection to host:port, then closes; reads whatever comes back
// (bounded).
void poke(const std::string& host, uint16_t port, const std::vector<uint8_t>& bytes) {
  net::Fd fd = net::connect_to(host, port, Deadline::after(seconds(10)));
  if (!bytes.empty())
    net::write_all(fd.get(), bytes.data(), bytes.size(), Deadline::after(seconds(10)), "peer");
  ::shutdown(fd.get(), SHUT_WR);
  timeval tv{2, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[512];
  while (::recv(fd.get(), buf, sizeof buf, 0) > 0) {
  }
}

// Random frames and truncated handshakes on a rank's tcp listener: refused, nothing breaks.
// A well-formed handshake (claiming to be rank 2, which never talks to rank 0) followed by a
// garbage frame makes rank 0 drop that connection naming the bad frame, while ranks 0 and 1
// go on working.
TEST(GarbageFrames, OnATcpDataConnection) {
  RunOptions opt;
  auto r = run_ranks(
      3,
      [&](RankContext& c) {
        auto pg = world(c, "tcp", seconds(60));
        ping(*pg, 0, 1);
        if (c.rank == 1) {
          auto [host, port] = tcp_address(*c.store, 0);
          std::mt19937 rng(1234);
          for (int i = 0; i < 12; ++i) {
            std::vector<uint8_t> junk(1 + rng() % 300);
            for (auto& b : junk) b = static_cast<uint8_t>(rng());
            if (i % 3 == 0) std::memcpy(junk.data(), "TCPT", std::min<size_t>(4, junk.size()));
            poke(host, port, junk);
          }
          std::vector<uint8_t> h = hello(1, 0, 3, "default");
          for (size_t cut : {size_t(0), size_t(3), size_t(11), h.size() - 1}) {
            poke(host, port, std::vector<uint8_t>(h.begin(), h.begin() + static_cast<long>(cut)));
          }
          // A valid hello as rank 2, then a frame header of garbage.
          std::vector<uint8_t> bad = hello(2, 0, 3, "default");
          std::mt19937 rng2(99);
          for (int i = 0; i < 48; ++i) bad.push_back(static_cast<uint8_t>(rng2()));
          poke(host, port, bad);
          c.store->set("poked", "1");
        }
        c.store->wait({"poked"});
        ping(*pg, 0, 1);
        c.store->set("done/" + std::to_string(c.rank), "1");
        c.store->wait({"done/0", "done/1", "done/2"});
        pg->destroy();
      },
      opt);
  EXPECT_RANKS_OK(r);
}

// Random bytes and truncated requests on the TCPStore's port: the server drops those
// connections and keeps serving.
TEST(GarbageFrames, OnTheStorePort) {
  setenv("TPCOMM_STORE_HANDSHAKE_TIMEOUT", "1s", 1);
  config::reload();
  TCPStore server("127.0.0.1", 0, -1, true, seconds(30), false);
  uint16_t port = server.port();
  std::mt19937 rng(42);
  for (int i = 0; i < 16; ++i) {
    std::vector<uint8_t> junk(rng() % 200);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    poke("127.0.0.1", port, junk);
  }
  TCPStore client("127.0.0.1", port, -1, false, seconds(30));
  client.set("k", "v");
  EXPECT_EQ(client.get_string("k"), "v");
  EXPECT_EQ(server.get_string("k"), "v");
  unsetenv("TPCOMM_STORE_HANDSHAKE_TIMEOUT");
  config::reload();
}

// A peer whose published address accepts connections but never answers: the operations
// waiting on it fail within the heartbeat timeout, naming it.
TEST(SilentListener, AcceptsButNeverAnswers) {
  RunOptions opt;
  opt.env = beat_env();
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = world(c, "tcp", seconds(30));
        if (c.rank == 1) {
          // A listener that never accepts (the kernel completes the TCP handshake) replaces this
          // rank's address before rank 0 first looks it up.
          int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
          net::Fd guard(fd);
          sockaddr_in a{};
          a.sin_family = AF_INET;
          a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
          ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
          ASSERT_EQ(::listen(fd, 16), 0);
          socklen_t len = sizeof a;
          getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
          std::string addr = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
          std::string published = std::string(1, '\x01') + addr;
          Bytes v(published.begin(), published.end());
          c.store->set("tpcomm/1/p2p/link/tcp/1", v);
          c.store->set("replaced", "1");
          c.store->wait({"finished"}, seconds(60));
          return;
        }
        c.store->wait({"replaced"});
        std::vector<int32_t> in(4), out(4, 1);
        auto rw = pg->irecv(Tensor::of(in), 1, 3);
        auto start = Clock::now();
        std::string err = error_of<PeerError>([&] {
          auto sw = pg->isend(Tensor::of(out), 1, 3);
          sw->wait();
          rw->wait();
        });
        c.store->set("finished", "1");
        EXPECT_LT(Clock::now() - start, seconds(20)) << err;
        EXPECT_TRUE(contains(err, "rank 1")) << err;
        EXPECT_TRUE(contains(err, "never completed the handshake")) << err;
        pg->destroy();
      },
      opt);
  EXPECT_RANKS_OK(r);
}

}  // namespace
}  // namespace tpcomm::testing
