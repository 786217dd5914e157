// A network cut (issue: never hang silently): two ranks in network namespaces joined by a
// veth pair that the test creates; the link goes down mid-job. No socket error ever comes
// (nothing closes the connections); the heartbeat fails the pending operations on both sides
// within its timeout, naming the peer and its host. Skipped, saying why, where namespaces
// cannot be made (no root, no `ip`).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/multiproc.h"
#include "tpcomm/tpcomm.hpp"

namespace tpcomm::testing {
namespace {

using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

int sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

// Two namespaces "<base>a" and "<base>b", a veth pair between them with 10.<n>.<m>.1 and .2.
struct NetnsPair {
  std::string base, ns[2], dev[2], ip[2];
  bool ok = false;
  std::string why;

  NetnsPair() {
    int id = static_cast<int>(getpid() % 50000);
    base = "tpc" + std::to_string(id);
    std::string net = "10." + std::to_string(100 + id / 250 % 100) + "." + std::to_string(id % 250);
    for (int i = 0; i < 2; ++i) {
      ns[i] = base + (i ? "b" : "a");
      dev[i] = "tv" + std::to_string(id) + (i ? "b" : "a");
      ip[i] = net + "." + std::to_string(i + 1);
    }
    if (geteuid() != 0) {
      why = "needs root to create network namespaces";
      return;
    }
    std::vector<std::string> steps = {
        "ip netns add " + ns[0],
        "ip netns add " + ns[1],
        "ip link add " + dev[0] + " netns " + ns[0] + " type veth peer name " + dev[1] + " netns " +
            ns[1],
    };
    for (int i = 0; i < 2; ++i) {
      steps.push_back("ip -n " + ns[i] + " addr add " + ip[i] + "/24 dev " + dev[i]);
      steps.push_back("ip -n " + ns[i] + " link set " + dev[i] + " up");
      steps.push_back("ip -n " + ns[i] + " link set lo up");
    }
    for (const std::string& s : steps) {
      if (sh(s) != 0) {
        why = "'" + s + "' failed (no network namespace support here?)";
        return;
      }
    }
    ok = true;
  }
  ~NetnsPair() {
    sh("ip netns del " + ns[0]);  // takes the veth pair with it
    sh("ip netns del " + ns[1]);
  }
};

// Moves the calling (single-threaded, freshly forked) process into namespace `name`.
bool enter(const std::string& name) {
  int fd = open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = setns(fd, CLONE_NEWNET) == 0;
  close(fd);
  return ok;
}

TEST(NetworkCut, LinkDownMidJobFailsPendingOpsWithinTheHeartbeatTimeout) {
  NetnsPair net;
  if (!net.ok) GTEST_SKIP() << "network namespaces unavailable: " << net.why;
  RunOptions opt;
  opt.timeout = std::chrono::milliseconds(60000);
  opt.env = {{"TPCOMM_HEARTBEAT_INTERVAL", "200ms"}, {"TPCOMM_HEARTBEAT_TIMEOUT", "2s"}};
  opt.rank_env = [&](int rank) {
    return std::map<std::string, std::string>{{"TPCOMM_HOSTID", rank ? "nodeB" : "nodeA"},
                                              {"TPCOMM_SOCKET_ADDR", net.ip[rank]}};
  };
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        ASSERT_TRUE(enter(net.ns[c.rank])) << "cannot enter namespace " << net.ns[c.rank];
        InitOptions o;
        o.backend = "tcp";
        o.timeout = seconds(60);
        auto pg = ProcessGroup::create(c.store, c.rank, 2, o);
        int peer = 1 - c.rank;
        // Traffic both ways over the veth pair first.
        int32_t x = c.rank, y = -1;
        auto rw = pg->irecv(Tensor::of(&y, 1), peer, 1);
        pg->send(Tensor::of(&x, 1), peer, 1);
        rw->wait();
        EXPECT_EQ(y, peer);
        // Each rank waits for a message that will never come; then the link is cut.
        std::vector<float> buf(1000);
        auto w = pg->irecv(Tensor::of(buf), peer, 2);
        c.store->set("posted/" + std::to_string(c.rank), "1");
        c.store->wait({"posted/0", "posted/1"});
        if (c.rank == 0) {
          EXPECT_EQ(sh("ip -n " + net.ns[0] + " link set " + net.dev[0] + " down"), 0);
          c.store->set("cut", "1");
        }
        c.store->wait({"cut"});
        auto start = Clock::now();
        std::string err;
        try {
          w->wait(seconds(30));
        } catch (const PeerError& e) {
          err = e.what();
        }
        EXPECT_LT(Clock::now() - start, seconds(15)) << err;
        EXPECT_TRUE(contains(err, "rank " + std::to_string(peer))) << err;
        EXPECT_TRUE(contains(err, "not even a heartbeat")) << err;
        EXPECT_TRUE(contains(err, peer ? "host 'nodeB'" : "host 'nodeA'")) << err;
        c.store->set("done/" + std::to_string(c.rank), "1");
        c.store->wait({"done/0", "done/1"});
        pg->destroy();
      },
      opt);
  EXPECT_RANKS_OK(r);
}

}  // namespace
}  // namespace tpcomm::testing
