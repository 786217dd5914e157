// The tcp transport through the link-layer interface, instances in one process (and a forked
// fake peer): messages of every size around the frame header, the socket buffer and the
// receive buffer arrive whole and in order, with the hot-socket read (TPCOMM_SOCKET_POLL_EVERY)
// on and off; puts and new connections keep moving while one socket is hot; garbage is
// refused naming the rank; a peer killed in the middle of a message or a put fails the link
// naming the rank.
#include <signal.h>
#include <sys/wait.h>

#include <cstring>
#include <thread>
#include <tuple>

#include "tcp/tcp_test_util.h"
#include "transports/tcp/congestion.h"
#include "transports/tcp/device.h"

namespace tpcomm::transport::tcp_test {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Parameter: TPCOMM_SOCKET_POLL_EVERY ("1": poll every round, the path without a hot socket).
// The suite runs twice: polling every socket every round with the default put sockets (one
// on loopback), and reading a hot socket for 8 rounds with two put sockets (puts striped).
struct TcpParams {
  const char* poll_every;
  const char* nsocks;  // TPCOMM_SOCKET_NSOCKS, nullptr: the default
};

class TcpTransportTest : public ::testing::TestWithParam<TcpParams> {
 protected:
  void SetUp() override {
    if (!has_transport("tcp")) GTEST_SKIP() << "tcp transport not built";
    set_env("TPCOMM_SOCKET_POLL_EVERY", GetParam().poll_every);
    set_env("TPCOMM_SOCKET_NSOCKS", GetParam().nsocks);
  }
  void TearDown() override {
    for (const char* v : {"TPCOMM_SOCKET_POLL_EVERY", "TPCOMM_SOCKET_BUFSIZE", "TPCOMM_SOCKET_NSOCKS"})
      set_env(v, nullptr);
  }
};

std::vector<size_t> message_sizes(size_t max, size_t sockbuf) {
  std::vector<size_t> sizes;
  for (size_t s = 0; s <= 200; ++s) sizes.push_back(s);
  // Around multiples of the 48-byte frame header and of the socket buffer, and the top.
  for (size_t k : {2, 3, 10, 85, 86}) {
    for (size_t d = 0; d < 3; ++d) sizes.push_back(k * tcp::kFrameSize - 1 + d);
  }
  for (size_t k = 1; k * sockbuf <= max; ++k) {
    for (size_t d = 0; d < 3; ++d) sizes.push_back(k * sockbuf - tcp::kFrameSize - 1 + d);
  }
  for (size_t s = 65535; s < max; s += 49999) sizes.push_back(s);
  for (size_t d = 0; d < 3; ++d) sizes.push_back(max - 2 + d);
  return sizes;
}

// Sends `sizes` back to back without letting the receiver progress until the sender sees
// back-pressure, so that frames are cut at every place by partial writes and reads.
void send_all_then_check(Transport& a, Sink& sa, Endpoint& ab, Transport& b, Sink& sb, int from,
                         const std::vector<size_t>& sizes, uint64_t seed) {
  size_t base = sb.messages.size();
  size_t sent = 0;
  auto end = Clock::now() + 60s;
  while (sent < sizes.size() && Clock::now() < end) {
    size_t n = sizes[sent];
    std::vector<uint8_t> data(n);
    for (size_t j = 0; j < n; ++j) data[j] = pattern(seed + sent, j);
    size_t c1 = n / 3, c2 = n / 2;  // gathered from three pieces
    iovec iov[3] = {{data.data(), c1}, {data.data() + c1, c2 - c1}, {data.data() + c2, n - c2}};
    PostStatus st = ab.send(iov);
    if (st == PostStatus::Ok) {
      ++sent;
      if (sent % 64 == 0) b.progress(sb);  // now and then: the rest piles up in the sender
    } else {
      ASSERT_EQ(st, PostStatus::NoResource);
      a.progress(sa);
      b.progress(sb);
    }
  }
  ASSERT_EQ(sent, sizes.size());
  ASSERT_TRUE(
      pump({{&a, &sa}, {&b, &sb}}, [&] { return sb.messages.size() == base + sizes.size(); }))
      << "only " << sb.messages.size() - base << " of " << sizes.size() << " arrived; last "
      << (sb.messages.empty() ? 0 : sb.messages.back().size()) << " bytes";
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto& m = sb.messages[base + i];
    ASSERT_EQ(m.size(), sizes[i]) << "message " << i;
    for (size_t j = 0; j < sizes[i]; ++j)
      ASSERT_EQ(m[j], pattern(seed + i, j)) << "message " << i << " byte " << j;
    EXPECT_EQ(sb.message_peers[base + i], from);
  }
}

TEST_P(TcpTransportTest, MessagesOfEverySizeArriveWholeAndInOrder) {
  // A small socket buffer (the kernel doubles it): partial writes and reads. Not below the
  // loopback MSS (64 KiB): a window smaller than one segment stalls on the zero-window probe
  // timer, which backs off to seconds.
  set_env("TPCOMM_SOCKET_BUFSIZE", "128K");
  auto a = make_tcp(0, 2), b = make_tcp(1, 2);
  Sink sa, sb;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  auto sizes = message_sizes(a->capabilities().max_message, 128 * 1024);
  send_all_then_check(*a, sa, *ab, *b, sb, 0, sizes, 1);
  send_all_then_check(*b, sb, *ba, *a, sa, 1, sizes, 2);
  // A ping-pong of small ones (the hot socket's case), then big ones again.
  for (int i = 0; i < 200; ++i) {
    uint64_t v = static_cast<uint64_t>(i);
    iovec one{&v, 8};
    Endpoint* e = i % 2 ? ba : ab;
    Sink& to = i % 2 ? sa : sb;
    size_t before = to.messages.size();
    ASSERT_EQ(e->send({&one, 1}), PostStatus::Ok);
    ASSERT_TRUE(
        pump({{a.get(), &sa}, {b.get(), &sb}}, [&] { return to.messages.size() > before; }));
    ASSERT_EQ(to.messages.back().size(), 8u);
    uint64_t got;
    std::memcpy(&got, to.messages.back().data(), 8);
    ASSERT_EQ(got, v);
  }
  send_all_then_check(*a, sa, *ab, *b, sb, 0, {0, 1, 262143, 262144, 5}, 3);
  EXPECT_TRUE(sa.errors.empty() && sb.errors.empty());
}

// While rank 0 reads one hot socket, a put on the put socket, and a third rank that connects
// and sends, still arrive (the other sockets are polled every few rounds).
TEST_P(TcpTransportTest, PutsAndNewPeersMoveWhileOneSocketIsHot) {
  auto a = make_tcp(0, 3), b = make_tcp(1, 3), c = make_tcp(2, 3);
  Sink sa, sb, sc;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  std::vector<uint8_t> dst(3 << 20, 0), src(3 << 20);
  for (size_t j = 0; j < src.size(); ++j) src[j] = pattern(7, j);
  auto rdst = a->register_memory(dst.data(), dst.size(), Device::cpu());
  auto rsrc = b->register_memory(src.data(), src.size(), Device::cpu());
  auto all = [&]() -> std::vector<std::pair<Transport*, Sink*>> {
    return {{a.get(), &sa}, {b.get(), &sb}, {c.get(), &sc}};
  };
  bool put_posted = false, sent_c = false;
  Endpoint* ca = nullptr;
  for (int i = 0; i < 300; ++i) {
    uint32_t v = static_cast<uint32_t>(i);
    iovec one{&v, 4};
    ASSERT_EQ(ba->send({&one, 1}), PostStatus::Ok);
    size_t before = sa.messages.size();
    ASSERT_TRUE(pump(all(), [&] { return sa.messages.size() > before; }));
    if (i == 100) {
      ASSERT_EQ(ba->put(*rsrc, 0, rdst->remote_key(), 0, src.size(), 42, 9), PostStatus::Ok);
      put_posted = true;
    }
    if (i == 150) ca = &c->connect(0, a->address(), Clock::now() + 30s);
    if (ca && ca->ready() && !sent_c) {
      uint32_t w = 0xC0FFEE;
      iovec x{&w, 4};
      ASSERT_EQ(ca->send({&x, 1}), PostStatus::Ok);
      sent_c = true;
    }
  }
  ASSERT_TRUE(put_posted);
  ASSERT_TRUE(pump(all(), [&] { return !sa.arrived.empty() && !sb.done.empty(); }));
  EXPECT_EQ(sa.arrived[0], 42u);
  EXPECT_EQ(sb.done[0], std::make_pair(uint64_t{9}, true));
  EXPECT_TRUE(dst == src);
  ASSERT_NE(ca, nullptr);
  ASSERT_TRUE(pump(all(), [&] {
    return std::find(sa.message_peers.begin(), sa.message_peers.end(), 2) != sa.message_peers.end();
  }));
  // Rank 1's messages are all there, in order.
  uint32_t expect = 0;
  for (size_t i = 0; i < sa.messages.size(); ++i) {
    if (sa.message_peers[i] != 1) continue;
    uint32_t got;
    std::memcpy(&got, sa.messages[i].data(), 4);
    ASSERT_EQ(got, expect++);
  }
  EXPECT_EQ(expect, 300u);
  EXPECT_TRUE(sa.errors.empty() && sb.errors.empty() && sc.errors.empty());
}

// Both ranks connect at once (a 2-rank collective's first call): rank 1 moves its messages
// onto the socket rank 0 connected, behind a Switch on its own socket. Messages rank 1 queued
// before the move (a backlog its own socket could not take yet) arrive before those sent after
// it, which rank 0 could read first: rank 0 holds its own socket until the Switch. A put still
// travels on rank 1's own sockets; rank 0's messages arrive in order too.
TEST_P(TcpTransportTest, BothConnectThenMessagesShareOneSocketInOrder) {
  set_env("TPCOMM_SOCKET_BUFSIZE", "128K");  // a backlog after a few messages
  set_env("TPCOMM_SOCKET_NSOCKS", "2");       // a put striped over two sockets of rank 1's
  auto a = make_tcp(0, 2), b = make_tcp(1, 2);
  Sink sa, sb;
  auto deadline = Clock::now() + 30s;
  Endpoint& ba = b->connect(0, a->address(), deadline);
  Endpoint& ab = a->connect(1, b->address(), deadline);  // before rank 0 accepted rank 1's
  auto& ta = static_cast<tcp::TcpEndpoint&>(ab);
  auto& tb = static_cast<tcp::TcpEndpoint&>(ba);
  // Rank 0 alone first: it accepts rank 1's sockets (it is the lower rank: it does not move).
  ASSERT_TRUE(pump({{a.get(), &sa}}, [&] { return ta.sockets.size() == 6; }));
  // Rank 1's first round reads the acknowledgements (ready) and accepts rank 0's sockets; the
  // next one reads their hello and moves.
  b->progress(sb);
  ASSERT_TRUE(ba.ready());
  ASSERT_EQ(tb.msg_tx_, nullptr);
  uint32_t next_b = 0, next_a = 0;
  auto send_from = [](Endpoint& e, uint32_t& next, size_t bytes) {
    std::vector<uint32_t> v(bytes / 4, next);
    iovec one{v.data(), bytes};
    PostStatus st = e.send({&one, 1});
    if (st == PostStatus::Ok) ++next;
    return st;
  };
  // More than the socket buffers take (the kernel doubles 128K, the window grows to a few).
  while (tb.tx[0]->queued_bytes < (2u << 20) && next_b < 500)
    ASSERT_EQ(send_from(ba, next_b, 64 << 10), PostStatus::Ok);
  ASSERT_GE(tb.tx[0]->queued_bytes, 2u << 20) << "no backlog: the test lost its point";
  ASSERT_TRUE(pump({{b.get(), &sb}}, [&] { return tb.msg_tx_ != nullptr; }))
      << "rank 1 never moved its messages";
  EXPECT_FALSE(tb.msg_tx_->initiated);  // the socket rank 0 connected
  // Rank 0 alone: it reads the answer to its connection (the move) and what of the backlog
  // its socket holds; the rest, and the Switch behind it, stay queued in rank 1.
  for (int i = 0; i < 20; ++i) a->progress(sa);
  ASSERT_TRUE(ta.hold_);
  size_t got_before = sa.messages.size();
  ASSERT_LT(got_before, next_b);
  // Sent after the move, these reach rank 0's own socket at once: it must not deliver them yet.
  for (int i = 0; i < 100; ++i) ASSERT_EQ(send_from(ba, next_b, 4), PostStatus::Ok);
  for (int i = 0; i < 20; ++i) a->progress(sa);
  EXPECT_EQ(sa.messages.size(), got_before);
  // A put from rank 1 still goes on its own sockets.
  std::vector<uint8_t> dst(1 << 20, 0), src(1 << 20);
  for (size_t j = 0; j < src.size(); ++j) src[j] = pattern(11, j);
  auto rdst = a->register_memory(dst.data(), dst.size(), Device::cpu());
  auto rsrc = b->register_memory(src.data(), src.size(), Device::cpu());
  ASSERT_EQ(ba.put(*rsrc, 0, rdst->remote_key(), 0, src.size(), 7, 3), PostStatus::Ok);
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}}, [&] { return ab.ready(); }));
  for (int i = 0; i < 100; ++i) ASSERT_EQ(send_from(ab, next_a, 4), PostStatus::Ok);
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}}, [&] {
    return sa.messages.size() == next_b && sb.messages.size() == next_a && !sa.arrived.empty();
  })) << sa.messages.size() << " of " << next_b << " and " << sb.messages.size() << " of "
      << next_a;
  for (Sink* s : {&sa, &sb})
    for (size_t i = 0; i < s->messages.size(); ++i) {
      uint32_t got;
      ASSERT_GE(s->messages[i].size(), 4u);
      std::memcpy(&got, s->messages[i].data(), 4);
      ASSERT_EQ(got, i) << "message " << i << " out of order";
    }
  EXPECT_EQ(sa.arrived[0], 7u);
  EXPECT_TRUE(dst == src);
  EXPECT_TRUE(sa.errors.empty() && sb.errors.empty());
}

// The move waits for every socket of the lower rank's connection: a first socket alone (its
// connect() gave up after it, or a stray hello) is answered kAckShared but redirects nothing,
// and when it closes, messages keep going on the higher rank's own socket.
TEST_P(TcpTransportTest, AFirstSocketAloneDoesNotMoveTheMessages) {
  auto a = make_tcp(0, 2), b = make_tcp(1, 2);
  Sink sa, sb;
  Endpoint& ba = b->connect(0, a->address(), Clock::now() + 30s);
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}}, [&] { return ba.ready(); }));
  auto& tb = static_cast<tcp::TcpEndpoint&>(ba);
  {
    FakePeer half;
    ASSERT_TRUE(half.connect(b->address(), 0, 1, 2, [&] { b->progress(sb); }, "tcp-test", 3));
    EXPECT_EQ(half.ack_status, tcp::kAckShared);
    for (int i = 0; i < 20; ++i) b->progress(sb);
    EXPECT_EQ(tb.msg_tx_, nullptr);
  }  // closed
  ASSERT_TRUE(pump({{b.get(), &sb}}, [&] { return tb.share_on_ == nullptr; }));
  for (uint32_t i = 0; i < 10; ++i) {
    iovec one{&i, 4};
    ASSERT_EQ(ba.send({&one, 1}), PostStatus::Ok);
  }
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}}, [&] { return sa.messages.size() == 10; }));
  EXPECT_EQ(tb.msg_tx_, nullptr);
  EXPECT_TRUE(sa.errors.empty() && sb.errors.empty());
}

// The higher rank goes away after answering kAckShared but before its Switch went out (its own
// sockets were not answered yet): the lower rank, holding its own sockets for that Switch,
// fails the link naming the rank instead of waiting forever.
TEST_P(TcpTransportTest, APeerGoneBeforeItsSwitchFailsTheLink) {
  auto a = make_tcp(0, 2);
  Sink sa;
  {
    auto b = make_tcp(1, 2);
    Sink sb;
    auto deadline = Clock::now() + 30s;
    auto& tb = static_cast<tcp::TcpEndpoint&>(b->connect(0, a->address(), deadline));
    a->connect(1, b->address(), deadline);
    // Rank 1 alone: it accepts and answers rank 0's sockets (kAckShared) and moves; its Switch
    // waits on its own first socket, which rank 0 has not answered. Then it is gone.
    ASSERT_TRUE(pump({{b.get(), &sb}}, [&] { return tb.msg_tx_ != nullptr; }));
    ASSERT_FALSE(tb.ready());
  }
  ASSERT_TRUE(pump({{a.get(), &sa}}, [&] { return !sa.errors.empty(); }));
  EXPECT_EQ(sa.errors[0].first, 1);
  EXPECT_TRUE(contains(sa.errors[0].second, "before moving its messages")) << sa.errors[0].second;
}

// A message frame on a put socket (index >= 1, read header by header) is refused naming the rank.
TEST_P(TcpTransportTest, AMessageOnAPutSocketIsRefused) {
  auto a = make_tcp(0, 2);
  Sink sa;
  FakePeer msg, put;
  auto pump_a = [&] { a->progress(sa); };
  ASSERT_TRUE(msg.connect(a->address(), 1, 0, 2, pump_a, "tcp-test", 2, 0));
  ASSERT_TRUE(put.connect(a->address(), 1, 0, 2, pump_a, "tcp-test", 2, 1));
  ASSERT_TRUE(put.message({1, 2, 3}));
  ASSERT_TRUE(pump({{a.get(), &sa}}, [&] { return !sa.errors.empty(); }));
  EXPECT_EQ(sa.errors[0].first, 1);
  EXPECT_TRUE(contains(sa.errors[0].second, "message on a put socket")) << sa.errors[0].second;
}

// Garbage where a frame header should be fails the link naming the rank and what was wrong;
// garbage instead of a handshake is refused without harm.
TEST_P(TcpTransportTest, GarbageIsRefusedNamingTheRank) {
  auto a = make_tcp(0, 3);
  Sink sa;
  auto pump_a = [&] { a->progress(sa); };
  {
    // Not a handshake at all: the connection is closed, nothing is reported.
    std::vector<uint8_t> addr = a->address();
    auto [host, port] = net::split_host_port(std::string(addr.begin(), addr.end()));
    net::Fd fd = net::connect_to(host, port, Deadline::after(10s));
    std::vector<uint8_t> junk(64, 'x');
    net::write_all(fd.get(), junk.data(), junk.size(), Deadline::after(10s), "rank 0");
    bool closed = false;
    auto end = Clock::now() + 20s;
    while (!closed && Clock::now() < end) {
      pump_a();
      char buf[256];
      ssize_t r = ::recv(fd.get(), buf, sizeof buf, MSG_DONTWAIT);
      closed = r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    }
    EXPECT_TRUE(closed);
    EXPECT_TRUE(sa.errors.empty());
  }
  struct Case {
    tcp::Frame f;
    const char* expect;
  };
  tcp::Frame bad_kind;
  bad_kind.kind = static_cast<tcp::FrameKind>(9);
  tcp::Frame too_long;
  too_long.kind = tcp::FrameKind::Msg;
  too_long.len = 1ull << 40;
  int src = 1;
  for (const Case& k : {Case{bad_kind, "corrupt frame header (kind 9)"},
                        Case{too_long, "exceeds the 262144-byte limit"}}) {
    FakePeer p;
    ASSERT_TRUE(p.connect(a->address(), src, 0, 3, pump_a));
    ASSERT_TRUE(p.message({1, 2, 3}));  // a good one first: it arrives
    ASSERT_TRUE(p.frame(k.f));
    ASSERT_TRUE(pump({{a.get(), &sa}}, [&] { return !sa.errors.empty(); }));
    EXPECT_EQ(sa.errors[0].first, src);
    EXPECT_TRUE(contains(sa.errors[0].second, "malformed data from rank " + std::to_string(src)))
        << sa.errors[0].second;
    EXPECT_TRUE(contains(sa.errors[0].second, k.expect)) << sa.errors[0].second;
    ASSERT_FALSE(sa.messages.empty());
    EXPECT_EQ(sa.messages.back(), (std::vector<uint8_t>{1, 2, 3}));
    sa.errors.clear();
    ++src;  // a failed rank stays failed: the next case is another rank
  }
}

// A peer killed (SIGKILL) in the middle of a message, and another in the middle of a put,
// fail their links naming the rank; the messages they completed before still arrive.
TEST_P(TcpTransportTest, PeerKilledMidMessageFailsNamingTheRank) {
  auto a = make_tcp(0, 3);
  Sink sa;
  std::vector<uint8_t> dst(1 << 16);
  auto reg = a->register_memory(dst.data(), dst.size(), Device::cpu());
  RemoteKey key = reg->remote_key();
  uint64_t region;
  std::memcpy(&region, key.blob_data, sizeof region);
  std::vector<uint8_t> address = a->address();
  for (int src : {1, 2}) {
    // The child connects and writes; the parent progresses meanwhile.
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
      FakePeer p;
      bool ok = p.connect(address, src, 0, 3, [] { std::this_thread::sleep_for(1ms); });
      for (int i = 0; ok && i < 20; ++i) ok = p.message(std::vector<uint8_t>(8, uint8_t(i)));
      std::vector<uint8_t> part(100, 0x5A);
      tcp::Frame f;
      if (src == 1) {
        f.kind = tcp::FrameKind::Msg;
        f.len = 1000;
      } else {
        f.kind = tcp::FrameKind::Put;
        f.len = f.total = 4096;
        f.region = region;
        f.put_id = 1;
      }
      ok = ok && p.frame(f, part.data(), part.size());
      if (!ok) ::_exit(1);
      ::raise(SIGKILL);
    }
    ASSERT_GT(pid, 0);
    bool failed = pump({{a.get(), &sa}}, [&] { return !sa.errors.empty(); });
    if (!failed) ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(failed) << "no error reported for rank " << src;
    EXPECT_TRUE(WIFSIGNALED(status)) << "the fake peer did not get to its kill";
    EXPECT_EQ(sa.errors[0].first, src);
    const std::string& why = sa.errors[0].second;
    EXPECT_TRUE(contains(why, "rank " + std::to_string(src))) << why;
    EXPECT_TRUE(contains(why, src == 1 ? "in the middle of a message" : "in the middle of a put"))
        << why;
    size_t from_src = 0;
    for (int peer : sa.message_peers) from_src += peer == src;
    EXPECT_EQ(from_src, 20u);
    sa.errors.clear();
  }
  EXPECT_TRUE(sa.arrived.empty());
}

// TPCOMM_SOCKET_CONGESTION: "auto" gives every socket of a same-host pair reno (the
// connecting ones before connect(), the accepted ones from the listener); "system" leaves the
// kernel's default; a name is set on every socket, and one the kernel refuses changes nothing.
TEST(TcpCongestion, SameHostSocketsGetRenoInAutoMode) {
  if (!has_transport("tcp")) GTEST_SKIP() << "tcp transport not built";
  const std::string sys = tcp::system_congestion();
  if (sys.empty()) GTEST_SKIP() << "no /proc/sys/net/ipv4/tcp_congestion_control";
  for (const char* mode : {"auto", "system", "reno", "no_such_algorithm"}) {
    SCOPED_TRACE(mode);
    set_env("TPCOMM_SOCKET_CONGESTION", std::string(mode) == "auto" ? nullptr : mode);
    auto a = make_tcp(0, 2), b = make_tcp(1, 2);
    Sink sa, sb;
    Endpoint *ab, *ba;
    std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
    // An unknown name is refused by the kernel (a warning): the sockets keep the default.
    const std::string m = mode;
    const std::string want = m == "system" || m == "no_such_algorithm" ? sys : "reno";
    for (auto* ep : {static_cast<tcp::TcpEndpoint*>(ab), static_cast<tcp::TcpEndpoint*>(ba)}) {
      ASSERT_EQ(ep->sockets.size(), 2u);  // a message socket and (same host) one put socket
      for (tcp::Socket* s : ep->sockets) EXPECT_EQ(tcp::congestion_of(s->fd.get()), want);
    }
  }
  set_env("TPCOMM_SOCKET_CONGESTION", nullptr);
}

TEST(TcpCongestion, SameHostMeansLoopbackOrTheLocalAddress) {
  auto addr = [](const char* ip) { return net::resolve(ip, 1).front(); };
  EXPECT_TRUE(tcp::same_host(addr("10.1.2.3"), addr("127.0.0.1")));
  EXPECT_TRUE(tcp::same_host(addr("127.0.0.2"), addr("127.0.0.3")));
  EXPECT_TRUE(tcp::same_host(addr("10.1.2.3"), addr("10.1.2.3")));
  EXPECT_FALSE(tcp::same_host(addr("10.1.2.3"), addr("10.1.2.4")));
  EXPECT_TRUE(tcp::same_host(addr("fd00::1"), addr("::1")));
  EXPECT_TRUE(tcp::same_host(addr("fd00::1"), addr("fd00::1")));
  EXPECT_FALSE(tcp::same_host(addr("fd00::1"), addr("fd00::2")));
  EXPECT_FALSE(tcp::same_host(addr("10.1.2.3"), addr("fd00::2")));
}

// TPCOMM_SOCKET_NSOCKS: 0 (auto) connects one put socket to a peer on this host and two to
// other hosts; a positive value is taken as it is, and the accepting side adopts the count.
TEST(TcpOptions, PutSocketsAreOneWithinTheHostAndTwoElsewhereInAutoMode) {
  auto addr = [](const char* ip) { return net::resolve(ip, 1).front(); };
  EXPECT_EQ(tcp::put_sockets_for(0, addr("10.1.2.3"), addr("127.0.0.1")), 1);
  EXPECT_EQ(tcp::put_sockets_for(0, addr("10.1.2.3"), addr("10.1.2.3")), 1);
  EXPECT_EQ(tcp::put_sockets_for(0, addr("10.1.2.3"), addr("10.1.2.4")), 2);
  EXPECT_EQ(tcp::put_sockets_for(0, addr("fd00::1"), addr("fd00::2")), 2);
  EXPECT_EQ(tcp::put_sockets_for(3, addr("10.1.2.3"), addr("127.0.0.1")), 3);
  EXPECT_EQ(tcp::put_sockets_for(1, addr("10.1.2.3"), addr("10.1.2.4")), 1);
}

// Unsets TPCOMM_SOCKET_NSOCKS however the test ends.
struct NsocksReset {
  ~NsocksReset() { set_env("TPCOMM_SOCKET_NSOCKS", nullptr); }
};

TEST(TcpOptions, ConnectionsOpenTheConfiguredPutSockets) {
  if (!has_transport("tcp")) GTEST_SKIP() << "tcp transport not built";
  NsocksReset reset;
  for (const char* n : {"0", "3"}) {
    SCOPED_TRACE(n);
    set_env("TPCOMM_SOCKET_NSOCKS", std::string(n) == "0" ? nullptr : n);
    auto a = make_tcp(0, 2), b = make_tcp(1, 2);
    Sink sa, sb;
    Endpoint *ab, *ba;
    std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
    const size_t want = std::string(n) == "0" ? 2u : 4u;  // the message socket + the puts
    for (auto* ep : {static_cast<tcp::TcpEndpoint*>(ab), static_cast<tcp::TcpEndpoint*>(ba)})
      EXPECT_EQ(ep->sockets.size(), want);
    // A put larger than a socket's share still arrives whole.
    std::vector<uint8_t> src(300000), dst(src.size());
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
    auto rs = a->register_memory(src.data(), src.size(), Device::cpu());
    auto rd = b->register_memory(dst.data(), dst.size(), Device::cpu());
    ASSERT_EQ(ab->put(*rs, 0, rd->remote_key(), 0, src.size(), 42, 7), PostStatus::Ok);
    ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}}, [&] { return !sb.arrived.empty(); }));
    EXPECT_EQ(sb.arrived[0], 42u);
    ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}}, [&] { return !sa.done.empty(); }));
    EXPECT_EQ(sa.done[0], std::make_pair(uint64_t{7}, true));
    EXPECT_EQ(dst, src);
    EXPECT_TRUE(sa.errors.empty() && sb.errors.empty());
  }
}

// Ranks with different settings still connect: when both connect at once each connection has
// the count its connecting side chose (rank 0: 1 + 3 sockets, rank 1: 1 + 1; each sends its
// puts on its own), and puts move both ways.
TEST(TcpOptions, RanksWithDifferentPutSocketCountsInteroperate) {
  if (!has_transport("tcp")) GTEST_SKIP() << "tcp transport not built";
  NsocksReset reset;
  set_env("TPCOMM_SOCKET_NSOCKS", "3");
  auto a = make_tcp(0, 2);
  set_env("TPCOMM_SOCKET_NSOCKS", nullptr);
  auto b = make_tcp(1, 2);
  Sink sa, sb;
  const auto deadline = Clock::now() + 30s;
  Endpoint* ba = &b->connect(0, a->address(), deadline);
  Endpoint* ab = &a->connect(1, b->address(), deadline);
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}}, [&] { return ab->ready() && ba->ready(); }));
  auto& ta = static_cast<tcp::TcpEndpoint&>(*ab);
  auto& tb = static_cast<tcp::TcpEndpoint&>(*ba);
  EXPECT_EQ(ta.tx.size(), 4u);  // rank 0's own connection
  EXPECT_EQ(tb.tx.size(), 2u);  // rank 1's
  std::vector<uint8_t> x(400000), y(400000), xd(x.size()), yd(y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<uint8_t>(i * 3);
    y[i] = static_cast<uint8_t>(i * 5 + 1);
  }
  auto rx = a->register_memory(x.data(), x.size(), Device::cpu());
  auto ryd = b->register_memory(yd.data(), yd.size(), Device::cpu());
  auto ry = b->register_memory(y.data(), y.size(), Device::cpu());
  auto rxd = a->register_memory(xd.data(), xd.size(), Device::cpu());
  ASSERT_EQ(ab->put(*rx, 0, ryd->remote_key(), 0, x.size(), 1, 11), PostStatus::Ok);
  ASSERT_EQ(ba->put(*ry, 0, rxd->remote_key(), 0, y.size(), 2, 22), PostStatus::Ok);
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}},
                   [&] { return !sa.arrived.empty() && !sb.arrived.empty(); }));
  EXPECT_EQ(yd, x);
  EXPECT_EQ(xd, y);
  EXPECT_TRUE(sa.errors.empty() && sb.errors.empty());
}

// A socket buffer too small to move data on loopback is raised to the floor; 0 (the kernel's
// auto-tuning) and larger values are kept.
TEST(TcpOptions, TinySocketBuffersAreRaised) {
  for (auto [given, expect] :
       {std::pair<const char*, uint64_t>{"4096", 65536}, {"0", 0}, {"256K", 262144}}) {
    setenv("TPCOMM_SOCKET_BUFSIZE", given, 1);
    config::reload();
    EXPECT_EQ(::tpcomm::tcp::Options::from_env().bufsize, expect) << given;
  }
  unsetenv("TPCOMM_SOCKET_BUFSIZE");
  config::reload();
}

// Transport::allocate_memory's default (private pages, registered): page-aligned, zeroed,
// writable; a put into the peer's allocated region lands byte for byte; length 0 gives an
// empty region; another device is refused with a clear error.
TEST_P(TcpTransportTest, AllocatedMemoryTakesPuts) {
  auto a = make_tcp(0, 2), b = make_tcp(1, 2);
  Sink sa, sb;
  Endpoint *ab, *ba;
  std::tie(ab, ba) = connect_pair(*a, sa, 0, *b, sb, 1);
  constexpr size_t kLen = (3u << 20) + 17;
  auto src = a->allocate_memory(kLen, Device::cpu());
  auto dst = b->allocate_memory(kLen, Device::cpu());
  ASSERT_EQ(dst->length(), kLen);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(dst->addr()) % 4096, 0u);
  auto* out = static_cast<uint8_t*>(dst->addr());
  EXPECT_EQ(out[0] | out[kLen / 2] | out[kLen - 1], 0);
  auto* in = static_cast<uint8_t*>(src->addr());
  for (size_t i = 0; i < kLen; ++i) in[i] = pattern(5, i);
  ASSERT_EQ(ab->put(*src, 1, dst->remote_key(), 1, kLen - 1, 42, 7), PostStatus::Ok);
  ASSERT_TRUE(pump({{a.get(), &sa}, {b.get(), &sb}},
                   [&] { return !sa.done.empty() && !sb.arrived.empty(); }));
  EXPECT_EQ(sa.done[0], std::make_pair(uint64_t{7}, true));
  EXPECT_EQ(sb.arrived[0], 42u);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(std::memcmp(out + 1, in + 1, kLen - 1), 0);
  EXPECT_EQ(a->allocate_memory(0, Device::cpu())->length(), 0u);
  std::string err;
  try {
    (void)a->allocate_memory(4096, Device::cuda(0));
  } catch (const NotSupportedError& e) {
    err = e.what();
  }
  EXPECT_TRUE(contains(err, "tcp transport: allocating") && contains(err, "host memory only"))
      << err;
  EXPECT_TRUE(sa.errors.empty() && sb.errors.empty());
}

INSTANTIATE_TEST_SUITE_P(Tcp, TcpTransportTest,
                         ::testing::Values(TcpParams{"1", nullptr}, TcpParams{"8", "2"}),
                         [](const auto& info) {
                           return std::string("poll_every_") + info.param.poll_every +
                                  (info.param.nsocks ? std::string("_put_sockets_") +
                                                           info.param.nsocks
                                                     : std::string("_put_sockets_auto"));
                         });

}  // namespace
}  // namespace tpcomm::transport::tcp_test
