// The ibverbs transport by itself on the loopback test device, two instances
// in one process sharing a HashStore: connection, message and put with immediate, and the
// failures named with the peer, the NIC and the completion status in words (a wrong rkey, a
// QP forced into the error state), after which posts answer PeerFailed.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/ibverbs_device.h"
#include "tpcomm/store.hpp"
#include "tpcomm/transport/transport.hpp"

namespace tpcomm::testing {
namespace {

const char* kFake = TPCOMM_TEST_BIN_DIR "/libtpcomm_fake_verbs.so";

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

struct Sink : transport::EventSink {
  std::vector<std::string> messages;
  std::vector<uint32_t> arrived;
  std::map<uint64_t, bool> done;
  std::map<int, std::string> errors;
  void on_message(int, std::span<const uint8_t> d) override {
    messages.emplace_back(d.begin(), d.end());
  }
  void on_put_arrived(int, uint32_t imm) override { arrived.push_back(imm); }
  void on_put_done(uint64_t c, bool ok) override { done[c] = ok; }
  void on_peer_error(int p, const std::string& r) override { errors[p] = r; }
};

class IbvTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!transport::has_transport("ibverbs"))
      GTEST_SKIP() << "this build has no ibverbs transport (no rdma-core headers)";
    if (access(kFake, R_OK) != 0) GTEST_SKIP() << "the test device " << kFake << " is not built";
    setenv("TPCOMM_IBVERBS_LIB", kFake, 1);
    setenv("TPCOMM_IB_TIMEOUT", "16", 1);
    config::reload();
    auto store = std::make_shared<HashStore>();
    store->set_timeout(std::chrono::seconds(30));
    for (int r = 0; r < 2; ++r) {
      transport::TransportContext c;
      c.rank = r;
      c.world_size = 2;
      c.job_id = "ibv-test";
      c.host_id = "h" + std::to_string(r);
      c.store = store;
      c.timeout = std::chrono::seconds(30);
      t_[r] = transport::create_transport("ibverbs", c);
    }
  }
  void TearDown() override {
    t_[0].reset();
    t_[1].reset();
    unsetenv("TPCOMM_IBVERBS_LIB");
    unsetenv("TPCOMM_IB_TIMEOUT");
    config::reload();
  }
  // Progresses both until `done` holds (10 s at most).
  template <class F>
  bool until(F done) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      t_[0]->progress(s_[0]);
      t_[1]->progress(s_[1]);
      if (done()) return true;
    }
    return false;
  }
  // Connects 0 -> 1; returns both endpoints once ready.
  std::pair<transport::Endpoint*, transport::Endpoint*> connect() {
    auto dl = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    transport::Endpoint* a = &t_[0]->connect(1, t_[1]->address(), dl);
    transport::Endpoint* b = nullptr;
    EXPECT_TRUE(until([&] {
      if (b == nullptr && a->ready()) b = &t_[1]->connect(0, t_[0]->address(), dl);
      return b != nullptr && b->ready();
    }));
    return {a, b};
  }
  std::unique_ptr<transport::Transport> t_[2];
  Sink s_[2];
};

TEST_F(IbvTransportTest, MessageAndPutWithImmediate) {
  auto [a, b] = connect();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(t_[0]->capabilities().recv_slots, 32u);
  EXPECT_TRUE(t_[0]->capabilities().native_put);
  std::string small = "tiny", big(20000, 'x');
  iovec v1{small.data(), small.size()}, v2{big.data(), big.size()};
  ASSERT_EQ(a->send({&v1, 1}), transport::PostStatus::Ok);  // inline
  ASSERT_EQ(a->send({&v2, 1}), transport::PostStatus::Ok);  // from the send ring
  std::vector<uint8_t> src(1 << 20), dst(1 << 20, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 13);
  auto rs = t_[0]->register_memory(src.data(), src.size(), Device::cpu());
  auto rd = t_[1]->register_memory(dst.data(), dst.size(), Device::cpu());
  ASSERT_EQ(a->put(*rs, 0, rd->remote_key(), 0, src.size(), 4242, 7), transport::PostStatus::Ok);
  ASSERT_TRUE(until([&] { return s_[1].arrived.size() == 1 && s_[0].done.count(7); }));
  EXPECT_EQ(s_[1].arrived[0], 4242u);
  EXPECT_TRUE(s_[0].done[7]);
  EXPECT_EQ(src, dst);
  ASSERT_EQ(s_[1].messages.size(), 2u);
  EXPECT_EQ(s_[1].messages[0], small);
  EXPECT_EQ(s_[1].messages[1], big);
  std::string huge(70000, 'y');
  iovec v3{huge.data(), huge.size()};
  EXPECT_THROW((void)a->send({&v3, 1}), InvalidArgument);
  EXPECT_THROW((void)a->put(*rs, 1, rd->remote_key(), 0, src.size(), 1, 8), InvalidArgument);
}

TEST_F(IbvTransportTest, WrongRkeyFailsThePutNamingPeerNicAndStatus) {
  auto [a, b] = connect();
  ASSERT_NE(b, nullptr);
  std::vector<uint8_t> src(4096), dst(4096);
  auto rs = t_[0]->register_memory(src.data(), src.size(), Device::cpu());
  auto rd = t_[1]->register_memory(dst.data(), dst.size(), Device::cpu());
  transport::RemoteKey k = rd->remote_key();
  k.blob_data[1] ^= 0x5a;  // another rkey
  ASSERT_EQ(a->put(*rs, 0, k, 0, 4096, 1, 99), transport::PostStatus::Ok);
  ASSERT_TRUE(until([&] { return s_[0].errors.count(1) && s_[0].done.count(99); }));
  EXPECT_FALSE(s_[0].done[99]);
  const std::string& e = s_[0].errors[1];
  EXPECT_TRUE(contains(e, "rank 1")) << e;
  EXPECT_TRUE(contains(e, "tpfake0:1")) << e;
  EXPECT_TRUE(contains(e, "remote access error")) << e;
  EXPECT_TRUE(contains(e, "remote key")) << e;
  std::string m = "after";
  iovec v{m.data(), m.size()};
  EXPECT_EQ(a->send({&v, 1}), transport::PostStatus::PeerFailed);
}

TEST_F(IbvTransportTest, QpForcedIntoErrorFailsThePeer) {
  auto [a, b] = connect();
  ASSERT_NE(b, nullptr);
  void* h = dlopen(kFake, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr);
  auto force = reinterpret_cast<int (*)(uint32_t)>(dlsym(h, "tpfake_force_qp_error"));
  ASSERT_NE(force, nullptr);
  EXPECT_EQ(force(0), 2);  // both QPs of this process
  ASSERT_TRUE(until([&] { return s_[0].errors.count(1) && s_[1].errors.count(0); }));
  EXPECT_TRUE(contains(s_[0].errors[1], "Work Request Flushed Error")) << s_[0].errors[1];
  EXPECT_TRUE(contains(s_[1].errors[0], "rank 0")) << s_[1].errors[0];
  std::string m = "after";
  iovec v{m.data(), m.size()};
  EXPECT_EQ(b->send({&v, 1}), transport::PostStatus::PeerFailed);
  dlclose(h);
}

TEST_F(IbvTransportTest, AddressOfAnotherJobOrRankIsRefused) {
  std::vector<uint8_t> addr = t_[1]->address();
  auto dl = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  try {
    t_[0]->connect(1, t_[0]->address(), dl);  // rank 0's own address published as rank 1's
    ADD_FAILURE() << "accepted another rank's address";
  } catch (const TransportError& e) {
    EXPECT_TRUE(contains(e.what(), "belongs to rank 0")) << e.what();
  }
  addr.resize(10);
  EXPECT_THROW(t_[0]->connect(1, addr, dl), TransportError);
}

}  // namespace
}  // namespace tpcomm::testing
