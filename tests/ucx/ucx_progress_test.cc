// How the ucx transport tells the engine's waits about its progress: over socket
// lanes only (UCX_TLS tcp) every progress round is a system call (Capabilities::
// progress_is_syscall, so a spinning wait neither pauses between rounds nor delays counting
// itself), and transferring() is true while a rendezvous' bytes move chunk after chunk (a wait
// past its spin then keeps polling instead of yielding or handing the stream to the progress
// thread), false when nothing is in flight and once the transfer is done.
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "common/transport_test_util.h"
#include "ucx/ucx_test_util.h"

namespace tpcomm::testing {
namespace {

using namespace std::chrono_literals;
using transport::PostStatus;
using transport::test_util::pump;
using transport::test_util::set_env;

class UcxProgress : public UcxPairTest {
 protected:
  void SetUp() override { set_up_pair("ucx-progress"); }
  bool tcp() const { return GetParam().name == "tcp"; }
  // Registers `in` at rank 0 and `out` at rank 1, sends `in` tagged `id` (completion
  // `cookie`) with a short message, and waits until rank 1 has that message; returns the
  // regions, which must outlive the transfer.
  std::pair<std::unique_ptr<transport::MemoryRegion>, std::unique_ptr<transport::MemoryRegion>>
  send_tagged(std::vector<uint8_t>& in, std::vector<uint8_t>& out, uint64_t id,
              uint64_t cookie) {
    auto src = t[0]->register_memory(in.data(), in.size(), Device::cpu());
    auto dst = t[1]->register_memory(out.data(), out.size(), Device::cpu());
    std::string m = std::to_string(in.size()) + " bytes under id " + std::to_string(id);
    iovec v{m.data(), m.size()};
    EXPECT_EQ(ep01->send_tagged_with_message({&v, 1}, *src, 0, in.size(), id, cookie),
              PostStatus::Ok);
    EXPECT_TRUE(both([&] { return !s[1].messages.empty(); }));
    return {std::move(src), std::move(dst)};
  }
};

TEST_P(UcxProgress, SocketLanesSayEveryRoundIsASystemCall) {
  // Connected first, so that the transports close without refused-connection noise.
  ASSERT_TRUE(both([&] { return ep01->ready() && ep10->ready(); }));
  EXPECT_EQ(t[0]->capabilities().progress_is_syscall, tcp()) << "UCX_TLS=" << GetParam().tls;
  EXPECT_EQ(t[1]->capabilities().progress_is_syscall, tcp());
}

TEST_P(UcxProgress, TransferringOnlyWhileARendezvousMoves) {
  EXPECT_FALSE(t[0]->transferring()) << "nothing posted yet";
  EXPECT_FALSE(t[1]->transferring());
  constexpr size_t kLen = 64u << 20;  // many tcp chunks
  std::vector<uint8_t> in(kLen), out(kLen, 0);
  for (size_t i = 0; i < kLen; i += 4096) in[i] = static_cast<uint8_t>(i >> 12);
  auto [src, dst] = send_tagged(in, out, 3, 30);
  ASSERT_FALSE(HasFailure());
  t[1]->recv_tagged(0, 3, *dst, 0, kLen, 4);
  bool seen = false;  // transferring() true on a side while the data was not all there
  ASSERT_TRUE(both([&] {
    bool done = !s[0].done.empty() && !s[1].arrived.empty();
    if (!done && (t[0]->transferring() || t[1]->transferring())) seen = true;
    return done;
  }, 60s));
  EXPECT_EQ(s[0].done[0], (std::pair<uint64_t, bool>{30, true}));
  EXPECT_EQ(std::memcmp(out.data(), in.data(), kLen), 0);
  // Over tcp the 64 MiB take many progress rounds, each moving a chunk; over shared memory
  // UCX may copy them in one.
  if (tcp()) {
    EXPECT_TRUE(seen) << "64 MiB over tcp moved without transferring() noticing";
  }
  EXPECT_FALSE(t[0]->transferring()) << "the send is complete";
  EXPECT_FALSE(t[1]->transferring()) << "the receive is complete";
  EXPECT_TRUE(s[0].errors.empty() && s[1].errors.empty());
}

// A transfer that waits (the data stays at the sender until the receiver takes it) is not
// "moving": once nothing moved for more than half a millisecond transferring() turns false,
// so a waiter sleeps as usual, and it turns true again when the data flows.
TEST_P(UcxProgress, AStalledTransferIsNotTransferring) {
  constexpr size_t kLen = 8u << 20;
  std::vector<uint8_t> in(kLen, 0x5a), out(kLen, 0);
  auto [src, dst] = send_tagged(in, out, 9, 90);
  ASSERT_FALSE(HasFailure());
  (void)t[0]->transferring();  // the look that sees the start
  // Nobody takes the data: the sender's transfer waits. Look again after 2 ms of progress
  // calls (a few tries: a late acknowledgement of the RTS may still count as movement once).
  bool stalled = false;
  for (int i = 0; i < 20 && !stalled; ++i) {
    auto until = std::chrono::steady_clock::now() + 2ms;
    while (std::chrono::steady_clock::now() < until) t[0]->progress(s[0]);
    stalled = !t[0]->transferring();
  }
  EXPECT_TRUE(stalled) << "a transfer waiting for its receive stayed transferring() for 40 ms";
  EXPECT_TRUE(s[0].done.empty()) << "the send completed without a receive";
  t[1]->recv_tagged(0, 9, *dst, 0, kLen, 1);
  ASSERT_TRUE(both([&] { return !s[0].done.empty() && !s[1].arrived.empty(); }, 60s));
  EXPECT_EQ(std::memcmp(out.data(), in.data(), kLen), 0);
  EXPECT_FALSE(t[0]->transferring());
  EXPECT_FALSE(t[1]->transferring());
}

INSTANTIATE_TEST_SUITE_P(Lanes, UcxProgress, kUcxLanes, lane_name);

// The classification follows the resolved UCX_TLS: tcp with self is sockets only; tcp with a
// shared-memory transport is not (its rounds read memory and the pause helps there), nor are
// lists that may name anything ("all", "^...").
TEST(UcxProgressTls, MixedListsAreNotSocketsOnly) {
  if (!transport::has_transport("ucx")) GTEST_SKIP() << "this build has no UCX";
  for (auto [tls, want] : {std::pair<const char*, bool>{"tcp,self", true},
                           {"tcp,posix,self", false}, {"^tcp", false}, {"all", false}}) {
    set_env("TPCOMM_UCX_TLS", tls);
    std::unique_ptr<transport::Transport> tr;
    try {
      auto ctx = transport::test_util::make_ctx(0, 1, std::string("ucx-tls-") + tls);
      ctx.store = std::make_shared<HashStore>();
      tr = transport::create_transport("ucx", ctx);
    } catch (const NotSupportedError& e) {
      set_env("TPCOMM_UCX_TLS", nullptr);
      GTEST_SKIP() << e.what();
    }
    EXPECT_EQ(tr->capabilities().progress_is_syscall, want) << "UCX_TLS=" << tls;
  }
  set_env("TPCOMM_UCX_TLS", nullptr);
}

}  // namespace
}  // namespace tpcomm::testing
