// Endpoint::send_tagged_with_message over UCX: the protocol's message travels inside
// UCX's rendezvous RTS (an active message) and the receiver holds the data until recv_tagged
// or discard_tagged. Two transports in one process, once per lane: the message arrives with
// the data still at the sender (its send is not done), the data lands byte for byte when taken
// (also from inside on_message, as the protocol does), a discard completes the sender without
// moving anything, a wrong length fails the link, many transfers taken in another order, the
// two-message form (send + send_tagged) still received, held data given back at shutdown, and
// a peer without the active-message handler sent the two messages instead.
#include <cstring>

#include "common/transport_test_util.h"
#include "ucx/ucx_test_util.h"

namespace tpcomm::testing {
namespace {

using namespace std::chrono_literals;
using transport::Endpoint;
using transport::MemoryRegion;
using transport::PostStatus;
using transport::Transport;
using transport::test_util::pump;
using transport::test_util::set_env;
using transport::test_util::Sink;

class UcxTaggedAm : public UcxPairTest {
 protected:
  void SetUp() override {
    set_up_pair("ucx-tagged-am");
    if (IsSkipped()) return;
    ASSERT_TRUE(t[0]->capabilities().tagged_data_with_message);
  }
  void TearDown() override {
    UcxPairTest::TearDown();
    set_env("TPCOMM_UCX_TAGGED", nullptr);
  }
  /// Sends `len` bytes of `src` under `id` with a message naming them.
  PostStatus send(const MemoryRegion& src, size_t len, uint64_t id, uint64_t cookie) {
    std::string m = "data " + std::to_string(id) + " of " + std::to_string(len);
    iovec v{m.data(), m.size()};
    return ep01->send_tagged_with_message({&v, 1}, src, 0, len, id, cookie);
  }
  static std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

};

std::vector<uint8_t> pattern(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + (i >> 11) + seed);
  return v;
}

// The message comes first, the data stays with the sender (whose send is not done) until the
// receiver takes it; then every byte is there and both sides hear of it.
TEST_P(UcxTaggedAm, TheMessageComesAndTheDataWaitsForItsReceive) {
  constexpr size_t kLen = (1 << 20) + 3;
  auto in = pattern(kLen, 1);
  std::vector<uint8_t> out(kLen + 16, 0xEE);
  auto src = t[0]->register_memory(in.data(), kLen, Device::cpu());
  auto dst = t[1]->register_memory(out.data(), out.size(), Device::cpu());
  ASSERT_EQ(send(*src, kLen, 7, 99), PostStatus::Ok);
  ASSERT_TRUE(both([&] { return !s[1].messages.empty(); }));
  EXPECT_EQ(text(s[1].messages[0]), "data 7 of 1048579");
  EXPECT_EQ(s[1].message_peers[0], 0);
  EXPECT_FALSE(both([&] { return !s[0].done.empty(); }, 100ms))
      << "the send completed before the receiver took the data";
  t[1]->recv_tagged(0, 7, *dst, 8, kLen, 5);
  ASSERT_TRUE(both([&] { return !s[0].done.empty() && !s[1].arrived.empty(); }));
  EXPECT_EQ(s[0].done[0], (std::pair<uint64_t, bool>{99, true}));
  EXPECT_EQ(s[1].arrived[0], 5u);
  EXPECT_EQ(std::memcmp(out.data() + 8, in.data(), kLen), 0);
  EXPECT_EQ(out[7], 0xEE);
  EXPECT_EQ(out[8 + kLen], 0xEE);
  EXPECT_TRUE(s[0].errors.empty() && s[1].errors.empty());
}

// The protocol takes the data from inside on_message, which the transport runs after holding it.
TEST_P(UcxTaggedAm, TakenFromInsideOnMessage) {
  constexpr size_t kLen = 300001;
  auto in = pattern(kLen, 2);
  std::vector<uint8_t> out(kLen, 0);
  auto src = t[0]->register_memory(in.data(), kLen, Device::cpu());
  auto dst = t[1]->register_memory(out.data(), kLen, Device::cpu());
  s[1].on_msg = [&](std::span<const uint8_t>) { t[1]->recv_tagged(0, 11, *dst, 0, kLen, 3); };
  ASSERT_EQ(send(*src, kLen, 11, 1), PostStatus::Ok);
  ASSERT_TRUE(both([&] { return !s[0].done.empty() && !s[1].arrived.empty(); }));
  EXPECT_EQ(out, in);
  EXPECT_TRUE(s[0].done[0].second);
}

// A discard completes the sender's send (ok: the receiver dropped it on purpose) and moves no
// byte; the next transfer under another id goes through.
TEST_P(UcxTaggedAm, ADiscardCompletesTheSenderAndMovesNothing) {
  constexpr size_t kLen = 1 << 20;
  auto in = pattern(kLen, 3);
  std::vector<uint8_t> out(kLen, 0);
  auto src = t[0]->register_memory(in.data(), kLen, Device::cpu());
  auto dst = t[1]->register_memory(out.data(), kLen, Device::cpu());
  ASSERT_EQ(send(*src, kLen, 20, 7), PostStatus::Ok);
  ASSERT_TRUE(both([&] { return !s[1].messages.empty(); }));
  t[1]->discard_tagged(0, 20);
  ASSERT_TRUE(both([&] { return !s[0].done.empty(); }));
  EXPECT_EQ(s[0].done[0], (std::pair<uint64_t, bool>{7, true}));
  EXPECT_EQ(out, std::vector<uint8_t>(kLen, 0));
  EXPECT_TRUE(s[1].arrived.empty());
  ASSERT_EQ(send(*src, kLen, 21, 8), PostStatus::Ok);
  ASSERT_TRUE(both([&] { return s[1].messages.size() == 2; }));
  t[1]->recv_tagged(0, 21, *dst, 0, kLen, 1);
  ASSERT_TRUE(both([&] { return s[0].done.size() == 2 && !s[1].arrived.empty(); }));
  EXPECT_EQ(out, in);
}

// A receive of another length than the data fails the link, naming both lengths; nothing is
// written.
TEST_P(UcxTaggedAm, AWrongLengthFailsTheLink) {
  constexpr size_t kLen = 100000;
  auto in = pattern(kLen, 4);
  std::vector<uint8_t> out(kLen, 0);
  auto src = t[0]->register_memory(in.data(), kLen, Device::cpu());
  auto dst = t[1]->register_memory(out.data(), kLen, Device::cpu());
  ASSERT_EQ(send(*src, kLen, 30, 1), PostStatus::Ok);
  ASSERT_TRUE(both([&] { return !s[1].messages.empty(); }));
  t[1]->recv_tagged(0, 30, *dst, 0, kLen - 1, 1);
  ASSERT_TRUE(both([&] { return !s[1].errors.empty(); }));
  EXPECT_EQ(s[1].errors[0].first, 0);
  EXPECT_TRUE(contains(s[1].errors[0].second, "100000 bytes, its RTS said 99999"))
      << s[1].errors[0].second;
  EXPECT_EQ(out, std::vector<uint8_t>(kLen, 0));
}

// Many transfers in flight at once, of several sizes, taken in the reverse order of their
// arrival: each lands in its own buffer.
TEST_P(UcxTaggedAm, ManyInFlightTakenInAnotherOrder) {
  constexpr int kN = 48;
  std::vector<std::vector<uint8_t>> in, out;
  std::vector<std::unique_ptr<MemoryRegion>> srcs, dsts;
  for (int i = 0; i < kN; ++i) {
    size_t len = 65537 + static_cast<size_t>(i) * 40961;
    in.push_back(pattern(len, i));
    out.emplace_back(len, 0);
    srcs.push_back(t[0]->register_memory(in.back().data(), len, Device::cpu()));
    dsts.push_back(t[1]->register_memory(out.back().data(), len, Device::cpu()));
    ASSERT_EQ(send(*srcs.back(), len, 100 + i, i), PostStatus::Ok);
  }
  ASSERT_TRUE(both([&] { return s[1].messages.size() == kN; }));
  for (int i = kN - 1; i >= 0; --i)
    t[1]->recv_tagged(0, 100 + i, *dsts[i], 0, out[i].size(), static_cast<uint32_t>(i));
  ASSERT_TRUE(both([&] { return s[0].done.size() == kN && s[1].arrived.size() == kN; }));
  for (int i = 0; i < kN; ++i) EXPECT_EQ(out[i], in[i]) << i;
  for (auto& [cookie, ok] : s[0].done) EXPECT_TRUE(ok) << cookie;
}

// The two-message form (a sender with TPCOMM_UCX_TAGGED=tag: send, then send_tagged) is
// received by the same recv_tagged.
TEST_P(UcxTaggedAm, TheTwoMessageFormIsReceivedToo) {
  constexpr size_t kLen = 200000;
  auto in = pattern(kLen, 5);
  std::vector<uint8_t> out(kLen, 0);
  auto src = t[0]->register_memory(in.data(), kLen, Device::cpu());
  auto dst = t[1]->register_memory(out.data(), kLen, Device::cpu());
  std::string m = "rts";
  iovec v{m.data(), m.size()};
  ASSERT_EQ(ep01->send({&v, 1}), PostStatus::Ok);
  ASSERT_EQ(ep01->send_tagged(*src, 0, kLen, 40, 2), PostStatus::Ok);
  ASSERT_TRUE(both([&] { return !s[1].messages.empty(); }));
  t[1]->recv_tagged(0, 40, *dst, 0, kLen, 9);
  ASSERT_TRUE(both([&] { return !s[0].done.empty() && !s[1].arrived.empty(); }));
  EXPECT_EQ(out, in);
}

// Bad requests fail clearly: a message above max_message, a source range outside the region.
TEST_P(UcxTaggedAm, BadRequestsAreRefused) {
  std::vector<uint8_t> in(4096);
  auto src = t[0]->register_memory(in.data(), in.size(), Device::cpu());
  std::vector<uint8_t> big(t[0]->capabilities().max_message + 1);
  iovec v{big.data(), big.size()};
  EXPECT_TRUE(contains(error_of<InvalidArgument>([&] {
                         (void)ep01->send_tagged_with_message({&v, 1}, *src, 0, 1, 1, 1);
                       }),
                       "exceeds max_message"));
  iovec small{in.data(), 8};
  EXPECT_TRUE(contains(error_of<InvalidArgument>([&] {
                         (void)ep01->send_tagged_with_message({&small, 1}, *src, 1, 4096, 1, 1);
                       }),
                       "outside the registered"));
}

// Data held when the receiver shuts down is given back to UCX: the sender's send completes.
TEST_P(UcxTaggedAm, HeldDataIsGivenBackAtShutdown) {
  constexpr size_t kLen = 1 << 20;
  auto in = pattern(kLen, 6);
  auto src = t[0]->register_memory(in.data(), kLen, Device::cpu());
  ASSERT_EQ(send(*src, kLen, 50, 4), PostStatus::Ok);
  ASSERT_TRUE(both([&] { return !s[1].messages.empty(); }));
  // The receiver's close flushes its endpoint: progress the sender meanwhile.
  std::thread closer([&] { t[1].reset(); });
  bool done = pump({{t[0].get(), &s[0]}}, [&] { return !s[0].done.empty(); }, 20s);
  closer.join();
  ASSERT_TRUE(done) << "the sender's send never completed";
  // As for data the receiver drops on purpose: the send is done, and was not refused.
  EXPECT_EQ(s[0].done[0], (std::pair<uint64_t, bool>{4, true}));
}

// A peer that does not take the active message (tagged data off there: no handler, its address
// says so) gets the message and then the data, and takes them as before.
TEST_P(UcxTaggedAm, APeerWithoutTheHandlerGetsTwoMessages) {
  t[0].reset();
  t[1].reset();
  for (int r = 0; r < 2; ++r) {
    set_env("TPCOMM_UCX_TAGGED", r == 1 ? "off" : nullptr);
    auto ctx = transport::test_util::make_ctx(r, 2, "ucx-tagged-am-mixed");
    ctx.store = std::make_shared<HashStore>();
    t[r] = transport::create_transport("ucx", ctx);
  }
  ASSERT_TRUE(t[0]->capabilities().tagged_data_with_message);
  ASSERT_FALSE(t[1]->capabilities().tagged_data);
  auto deadline = std::chrono::steady_clock::now() + 30s;
  ep01 = &t[0]->connect(1, t[1]->address(), deadline);
  ep10 = &t[1]->connect(0, t[0]->address(), deadline);
  constexpr size_t kLen = 500000;
  auto in = pattern(kLen, 7);
  std::vector<uint8_t> out(kLen, 0);
  auto src = t[0]->register_memory(in.data(), kLen, Device::cpu());
  auto dst = t[1]->register_memory(out.data(), kLen, Device::cpu());
  ASSERT_EQ(send(*src, kLen, 60, 6), PostStatus::Ok);
  ASSERT_TRUE(both([&] { return !s[1].messages.empty(); }));
  EXPECT_EQ(text(s[1].messages[0]), "data 60 of 500000");
  t[1]->recv_tagged(0, 60, *dst, 0, kLen, 2);
  ASSERT_TRUE(both([&] { return !s[0].done.empty() && !s[1].arrived.empty(); }));
  EXPECT_EQ(s[0].done[0], (std::pair<uint64_t, bool>{6, true}));
  EXPECT_EQ(out, in);
  EXPECT_TRUE(s[0].errors.empty() && s[1].errors.empty());
}

INSTANTIATE_TEST_SUITE_P(Lanes, UcxTaggedAm, kUcxLanes, lane_name);

}  // namespace
}  // namespace tpcomm::testing
