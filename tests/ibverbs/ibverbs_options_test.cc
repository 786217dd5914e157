// ibverbs transport settings the test device can observe: TPCOMM_IB_TC and
// TPCOMM_IB_SL reach the address vector of every QP (ah_attr.grh.traffic_class, ah_attr.sl);
// TPCOMM_IB_FORK_SAFE=1 calls ibv_fork_init; and the connection doorbell wakes a rank asleep
// on wait_fd() when a new peer posts a connection request (no 200 ms safety-net wait).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "../ibverbs_device/fake_verbs.h"
#include "core/config.h"
#include "tpcomm/store.hpp"
#include "tpcomm/transport/transport.hpp"

namespace tpcomm::testing {
namespace {

const char* kFake = TPCOMM_TEST_BIN_DIR "/libtpcomm_fake_verbs.so";

struct NullSink : transport::EventSink {
  void on_message(int, std::span<const uint8_t>) override {}
  void on_put_arrived(int, uint32_t) override {}
  void on_put_done(uint64_t, bool) override {}
  void on_peer_error(int, const std::string&) override {}
};

class IbvOptions : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!transport::has_transport("ibverbs"))
      GTEST_SKIP() << "this build has no ibverbs transport (no rdma-core headers)";
    if (access(kFake, R_OK) != 0) GTEST_SKIP() << "the test device " << kFake << " is not built";
    h_ = dlopen(kFake, RTLD_NOW);
    ASSERT_NE(h_, nullptr);
    stats_ = reinterpret_cast<int (*)(const char*, tpfake_stats*)>(dlsym(h_, "tpfake_get_stats"));
    reset_ = reinterpret_cast<void (*)()>(dlsym(h_, "tpfake_reset_stats"));
    ASSERT_TRUE(stats_ && reset_);
    reset_();
    setenv("TPCOMM_IBVERBS_LIB", kFake, 1);
  }
  void TearDown() override {
    t_[0].reset();
    t_[1].reset();
    for (const char* v :
         {"TPCOMM_IBVERBS_LIB", "TPCOMM_IB_TC", "TPCOMM_IB_SL", "TPCOMM_IB_FORK_SAFE"})
      unsetenv(v);
    config::reload();
    if (h_) dlclose(h_);
  }
  void create() {
    config::reload();
    auto store = std::make_shared<HashStore>();
    store->set_timeout(std::chrono::seconds(30));
    for (int r = 0; r < 2; ++r) {
      transport::TransportContext c;
      c.rank = r;
      c.world_size = 2;
      c.job_id = "ibv-options-" + std::to_string(getpid());
      c.host_id = "h";
      c.store = store;
      t_[r] = transport::create_transport("ibverbs", c);
    }
  }
  bool connect() {
    auto dl = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    transport::Endpoint* a = &t_[0]->connect(1, t_[1]->address(), dl);
    transport::Endpoint* b = nullptr;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      t_[0]->progress(sink_);
      t_[1]->progress(sink_);
      if (b == nullptr && a->ready()) b = &t_[1]->connect(0, t_[0]->address(), dl);
      if (b != nullptr && b->ready()) return true;
    }
    return false;
  }
  tpfake_stats stats() {
    tpfake_stats s{};
    stats_("tpfake0", &s);
    return s;
  }
  void* h_ = nullptr;
  int (*stats_)(const char*, tpfake_stats*) = nullptr;
  void (*reset_)() = nullptr;
  std::unique_ptr<transport::Transport> t_[2];
  NullSink sink_;
};

TEST_F(IbvOptions, TrafficClassAndServiceLevelReachTheAddressVector) {
  setenv("TPCOMM_IB_TC", "106", 1);
  setenv("TPCOMM_IB_SL", "3", 1);
  create();
  ASSERT_TRUE(connect());
  EXPECT_EQ(stats().last_traffic_class, 106);
  EXPECT_EQ(stats().last_sl, 3);
}

TEST_F(IbvOptions, DefaultsAreZero) {
  create();
  ASSERT_TRUE(connect());
  EXPECT_EQ(stats().last_traffic_class, 0);
  EXPECT_EQ(stats().last_sl, 0);
  EXPECT_EQ(stats().fork_init, 0);
}

TEST_F(IbvOptions, ForkSafeCallsIbvForkInit) {
  setenv("TPCOMM_IB_FORK_SAFE", "1", 1);
  create();
  EXPECT_EQ(stats().fork_init, 1);
}

// Rank 1 sleeps on its wait_fd() (armed, nothing pending); rank 0's connect() rings its
// doorbell, so the descriptor turns readable at once instead of never (the CQs are idle).
TEST_F(IbvOptions, ConnectionRequestWakesASleepingPeer) {
  create();
  ASSERT_TRUE(t_[1]->arm());
  pollfd p{t_[1]->wait_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 0), 0) << "readable before any request";
  auto dl = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  t_[0]->connect(1, t_[1]->address(), dl);
  EXPECT_EQ(poll(&p, 1, 10000), 1) << "the request did not wake the sleeping rank";
  EXPECT_FALSE(t_[1]->arm()) << "arm() must report the pending request";
  ASSERT_TRUE(connect());  // and the connection completes
}

}  // namespace
}  // namespace tpcomm::testing
