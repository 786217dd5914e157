// TCPStore server against bad input: random bytes, absurd lengths, half frames, unknown ops,
// other protocol versions, too many clients, thousands of idle connections. Each time the
// server drops (or answers) the offender and keeps serving everybody else.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "core/log.h"
#include "store/tcp_store_test_util.h"
#include "tpcomm/error.hpp"
#include "tpcomm/store.hpp"

namespace tpcomm {
namespace {

using namespace std::chrono_literals;
using store_wire::Op;
using testing::RawConn;
using testing::ScopedEnv;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

class TCPStoreRobust : public ::testing::Test {
 protected:
  void SetUp() override {
    master_ = std::make_unique<TCPStore>("127.0.0.1", 0, -1, true, 30s, false);
    good_ = std::make_unique<TCPStore>("127.0.0.1", master_->port(), -1, false, 30s);
  }
  // The well-behaved client still gets answers.
  void expect_serving() {
    int64_t before = good_->add("alive", 0);
    EXPECT_EQ(good_->add("alive", 1), before + 1);
    good_->set("probe", std::string_view("p"));
    EXPECT_EQ(master_->get_string("probe"), "p");
  }
  uint16_t port() const { return master_->port(); }

  std::unique_ptr<TCPStore> master_;
  std::unique_ptr<TCPStore> good_;
};

TEST_F(TCPStoreRobust, RandomBytesInsteadOfHello) {
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    RawConn raw(port());
    std::vector<uint8_t> junk(1 + rng() % 4096);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    junk[0] = 'x';  // never the magic's first byte
    raw.send_bytes(junk);
    EXPECT_TRUE(raw.closed_by_server()) << "round " << round;
  }
  expect_serving();
}

TEST_F(TCPStoreRobust, RandomBytesAfterHello) {
  std::mt19937 rng(11);
  for (int round = 0; round < 20; ++round) {
    RawConn raw(port());
    raw.hello();
    std::vector<uint8_t> junk(64 + rng() % 4096);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    raw.send_bytes(junk);
    // Either an error reply and a close, or a close.
    EXPECT_TRUE(raw.closed_by_server()) << "round " << round;
  }
  expect_serving();
}

TEST_F(TCPStoreRobust, MutatedValidFramesNeverCrashTheServer) {
  std::mt19937 rng(3);
  for (int round = 0; round < 40; ++round) {
    RawConn raw(port());
    raw.hello();
    std::vector<uint8_t> f = testing::frame(Op::kSet, 2, {"key", "value"});
    f[store_wire::kHeaderSize + rng() % (f.size() - store_wire::kHeaderSize)] ^=
        static_cast<uint8_t>(1 + rng() % 255);
    raw.send_bytes(f);
    raw.send_bytes(testing::frame(Op::kNumKeys, 3, {}));
    ::shutdown(raw.fd.get(), SHUT_WR);
    raw.closed_by_server(5s);
  }
  expect_serving();
}

TEST_F(TCPStoreRobust, LengthOfTwoToTheSixtyTwo) {
  RawConn raw(port());
  raw.hello();
  std::vector<uint8_t> f = testing::frame(Op::kSet, 9, {"k", "v"});
  uint64_t huge = uint64_t{1} << 62;
  std::memcpy(f.data() + 12, &huge, 8);
  raw.send_bytes(f.data(), store_wire::kHeaderSize);
  auto reply = raw.read_frame();
  EXPECT_EQ(reply.op, static_cast<uint8_t>(Op::kError));
  EXPECT_EQ(reply.id, 9u);
  EXPECT_TRUE(contains(reply.text, "TPCOMM_STORE_MAX_VALUE")) << reply.text;
  EXPECT_TRUE(contains(reply.text, std::to_string(huge))) << reply.text;
  EXPECT_TRUE(raw.closed_by_server());
  expect_serving();
  // The same before any hello: dropped too.
  RawConn raw2(port());
  raw2.send_bytes(f.data(), store_wire::kHeaderSize);
  EXPECT_TRUE(raw2.closed_by_server());
  expect_serving();
}

TEST_F(TCPStoreRobust, HalfAFrameThenDisconnect) {
  for (size_t cut : {size_t{3}, size_t{10}, store_wire::kHeaderSize, store_wire::kHeaderSize + 5}) {
    RawConn raw(port());
    raw.hello();
    auto f = testing::frame(Op::kSet, 2, {"half", std::string(100, 'v')});
    raw.send_bytes(f.data(), cut);
    raw.fd.reset();
  }
  // A frame whose header promises a large payload, then silence and a disconnect.
  {
    RawConn raw(port());
    raw.hello();
    auto f = testing::frame(Op::kSet, 2, {"big", std::string(1 << 20, 'v')});
    raw.send_bytes(f.data(), 4096);
    std::this_thread::sleep_for(50ms);
  }
  expect_serving();
  EXPECT_FALSE(good_->check({"half"}));
  EXPECT_FALSE(good_->check({"big"}));
}

TEST_F(TCPStoreRobust, UnknownOpAndFlagsAreProtocolErrors) {
  {
    RawConn raw(port());
    raw.hello();
    auto f = testing::frame(Op::kNumKeys, 5, {});
    f[5] = 42;  // no such op
    raw.send_bytes(f);
    auto reply = raw.read_frame();
    EXPECT_EQ(reply.op, static_cast<uint8_t>(Op::kError));
    EXPECT_TRUE(contains(reply.text, "unknown request op 42")) << reply.text;
    EXPECT_TRUE(raw.closed_by_server());
  }
  {
    RawConn raw(port());
    raw.hello();
    auto f = testing::frame(Op::kGet, 5, {"k"});
    f[6] = 1;  // no-reply flag on a get
    raw.send_bytes(f);
    auto reply = raw.read_frame();
    EXPECT_EQ(reply.op, static_cast<uint8_t>(Op::kError));
    EXPECT_TRUE(contains(reply.text, "flags")) << reply.text;
  }
  {
    RawConn raw(port());
    raw.hello();
    // A key count larger than the payload could hold: refused without reserving it.
    std::vector<uint8_t> b;
    store_wire::Writer w(&b);
    w.begin(Op::kWait, 6);
    w.u32(0xffffffffu);
    w.end();
    raw.send_bytes(b);
    auto reply = raw.read_frame();
    EXPECT_EQ(reply.op, static_cast<uint8_t>(Op::kError));
    EXPECT_TRUE(contains(reply.text, "exceeds the payload")) << reply.text;
  }
  expect_serving();
}

TEST_F(TCPStoreRobust, FirstFrameMustBeHello) {
  RawConn raw(port());
  raw.send_bytes(testing::frame(Op::kNumKeys, 1, {}));
  auto reply = raw.read_frame();
  EXPECT_EQ(reply.op, static_cast<uint8_t>(Op::kError));
  EXPECT_TRUE(contains(reply.text, "first frame must be a hello")) << reply.text;
  EXPECT_TRUE(raw.closed_by_server());
  expect_serving();
}

TEST_F(TCPStoreRobust, OtherProtocolVersionIsRefused) {
  RawConn raw(port());
  std::vector<uint8_t> b;
  store_wire::Writer w(&b);
  w.begin(Op::kHello, 1);
  w.str("default");
  w.str("future-client");
  w.u32(0);
  w.end();
  b[4] = store_wire::kVersion + 1;  // a future version
  raw.send_bytes(b);
  auto reply = raw.read_frame();
  EXPECT_EQ(reply.op, static_cast<uint8_t>(Op::kError));
  EXPECT_EQ(reply.code, static_cast<uint16_t>(store_wire::ErrorCode::kVersion));
  EXPECT_TRUE(contains(reply.text, "version " + std::to_string(store_wire::kVersion + 1)))
      << reply.text;
  EXPECT_TRUE(raw.closed_by_server());
  expect_serving();
}

TEST_F(TCPStoreRobust, ThousandsOfParkedRequestsOnOneConnection) {
  RawConn raw(port());
  raw.hello();
  std::vector<uint8_t> many;
  for (uint32_t i = 0; i < 5000; ++i) {
    std::vector<uint8_t> b;
    store_wire::Writer w(&b);
    w.begin(Op::kWait, 10 + i);
    w.u32(1);
    w.str("never/" + std::to_string(i));
    w.end();
    many.insert(many.end(), b.begin(), b.end());
  }
  raw.send_bytes(many);
  auto reply = raw.read_frame();
  EXPECT_EQ(reply.op, static_cast<uint8_t>(Op::kError));
  EXPECT_TRUE(contains(reply.text, "parked on one connection")) << reply.text;
  EXPECT_TRUE(raw.closed_by_server());
  expect_serving();
}

TEST_F(TCPStoreRobust, RepliesStillGoOutAfterTheClientHalfCloses) {
  RawConn raw(port());
  raw.hello();
  raw.send_bytes(testing::frame(Op::kAdd, 7, {"half-closed"}, 3, true));
  ::shutdown(raw.fd.get(), SHUT_WR);
  auto reply = raw.read_frame();
  EXPECT_EQ(reply.op, static_cast<uint8_t>(Op::kInt));
  EXPECT_EQ(reply.integer, 3);
  EXPECT_TRUE(raw.closed_by_server());
  expect_serving();
}

TEST(TCPStoreLimits, TooManyClientsIsRefusedNamingTheVariable) {
  ScopedEnv e("TPCOMM_STORE_MAX_CLIENTS", "2");
  TCPStore m("127.0.0.1", 0, -1, true, 10s, false);  // client 1 (its own)
  TCPStore c2("127.0.0.1", m.port(), -1, false, 10s);
  try {
    TCPStore c3("127.0.0.1", m.port(), -1, false, 10s);
    FAIL() << "a third client was accepted";
  } catch (const StoreError& ex) {
    EXPECT_TRUE(contains(ex.what(), "TPCOMM_STORE_MAX_CLIENTS=2")) << ex.what();
  }
  c2.set("k", std::string_view("v"));
  EXPECT_EQ(m.get_string("k"), "v");
}

TEST_F(TCPStoreRobust, FiveThousandIdleConnections) {
  constexpr int kIdle = 5000;
  rlim_t limit = testing::raise_fd_limit();
  // Both ends live in this process: two descriptors per connection, plus slack.
  if (limit < 2 * kIdle + 512) {
    GTEST_SKIP() << "RLIMIT_NOFILE is " << limit << ", need " << 2 * kIdle + 512
                 << " for 5000 loopback connections in one process (raise `ulimit -Hn`)";
  }
  // Idle, not silent forever: the handshake timeout must not close them during the test.
  ScopedEnv patient("TPCOMM_STORE_HANDSHAKE_TIMEOUT", "600s");
  SetUp();
  std::vector<net::Fd> idle;
  idle.reserve(kIdle);
  for (int i = 0; i < kIdle; ++i) {
    idle.push_back(net::connect_to("127.0.0.1", port(), Deadline::after(30s), 5ms));
    if (i % 1000 == 999) expect_serving();
  }
  expect_serving();
  // Half of them say hello, then everybody leaves at once.
  auto hello = testing::frame(Op::kHello, 1, {"default", "idle"}, 0, false);
  hello.insert(hello.end(), {0, 0, 0, 0});
  uint64_t len = hello.size() - store_wire::kHeaderSize;
  std::memcpy(hello.data() + 12, &len, 8);
  for (int i = 0; i < kIdle; i += 2)
    net::write_all(idle[i].get(), hello.data(), hello.size(), Deadline::after(10s), "server");
  expect_serving();
  idle.clear();
  expect_serving();
}

// The store's WARN lines go to a file for the scope of a test (read back with text()).
class StoreLogFile {
 public:
  StoreLogFile()
      : path_("/tmp/tpcomm-store-robust-" + std::to_string(::getpid()) + ".log"),
        level_("TPCOMM_DEBUG", "warn"),
        subsys_("TPCOMM_DEBUG_SUBSYS", "store"),
        file_("TPCOMM_DEBUG_FILE", path_) {
    log::reload();
  }
  ~StoreLogFile() {
    file_.reset();
    subsys_.reset();
    level_.reset();
    log::reload();
    std::remove(path_.c_str());
  }
  std::string text() const {
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  // Emplaced so that the destructor can restore the environment before the log reload.
  struct Env {
    Env(const char* n, const std::string& v) : env(std::make_unique<ScopedEnv>(n, v)) {}
    void reset() { env.reset(); }
    std::unique_ptr<ScopedEnv> env;
  };
  std::string path_;
  Env level_, subsys_, file_;
};

std::vector<uint8_t> hello_frame(const std::string& job = "default") {
  std::vector<uint8_t> b;
  store_wire::Writer w(&b);
  w.begin(Op::kHello, 1);
  w.str(job);
  w.str("raw-test");
  w.u32(0);
  w.end();
  return b;
}

// A connection that says nothing, or half a hello, loses its slot after
// TPCOMM_STORE_HANDSHAKE_TIMEOUT; handshaken clients, idle or not, keep theirs.
TEST(TCPStoreHandshake, SilentAndHalfHelloConnectionsAreClosed) {
  StoreLogFile log_file;
  ScopedEnv timeout("TPCOMM_STORE_HANDSHAKE_TIMEOUT", "1s");
  TCPStore master("127.0.0.1", 0, -1, true, 30s, false);
  TCPStore early("127.0.0.1", master.port(), -1, false, 30s);
  RawConn silent(master.port());
  RawConn half_header(master.port());
  RawConn half_payload(master.port());
  auto hello = hello_frame();
  half_header.send_bytes(hello.data(), 7);
  half_payload.send_bytes(hello.data(), hello.size() - 3);
  EXPECT_TRUE(silent.closed_by_server(20s));
  EXPECT_TRUE(half_header.closed_by_server(20s));
  EXPECT_TRUE(half_payload.closed_by_server(20s));
  // The server's own client and one that joined before: still served, long after 1 s.
  early.set("k", std::string_view("v"));
  EXPECT_EQ(master.get_string("k"), "v");
  EXPECT_EQ(early.add("n", 1), 1);
  // New clients are welcome.
  TCPStore late("127.0.0.1", master.port(), -1, false, 30s);
  EXPECT_EQ(late.get_string("k"), "v");
  std::string log = log_file.text();
  EXPECT_TRUE(contains(log, "no handshake within 1000 ms")) << log;
  EXPECT_TRUE(contains(log, "0 bytes of a hello arrived")) << log;
  EXPECT_TRUE(contains(log, "7 bytes of a hello arrived")) << log;
  EXPECT_TRUE(contains(log, "TPCOMM_STORE_HANDSHAKE_TIMEOUT")) << log;
}

// A client that dribbles its hello in pieces, but within the timeout, is served normally.
TEST(TCPStoreHandshake, SlowButValidClientWithinTheTimeoutWorks) {
  ScopedEnv timeout("TPCOMM_STORE_HANDSHAKE_TIMEOUT", "10s");
  TCPStore master("127.0.0.1", 0, -1, true, 30s, false);
  RawConn slow(master.port());
  auto hello = hello_frame();
  slow.send_bytes(hello.data(), 5);
  std::this_thread::sleep_for(200ms);
  slow.send_bytes(hello.data() + 5, 20);
  std::this_thread::sleep_for(200ms);
  slow.send_bytes(hello.data() + 25, hello.size() - 25);
  auto ok = slow.read_frame();
  ASSERT_EQ(ok.op, static_cast<uint8_t>(Op::kHelloOk)) << ok.text;
  slow.send_bytes(testing::frame(Op::kAdd, 2, {"slow"}, 5, true));
  auto r = slow.read_frame();
  EXPECT_EQ(r.op, static_cast<uint8_t>(Op::kInt)) << r.text;
  EXPECT_EQ(r.integer, 5);
  EXPECT_EQ(master.add("slow", 0), 5);
}

// TPCOMM_STORE_HANDSHAKE_TIMEOUT=0 keeps silent connections (no handshake deadline); a malformed
// value fails naming the variable.
TEST(TCPStoreHandshake, ZeroDisablesAndBadValuesAreRefused) {
  {
    ScopedEnv timeout("TPCOMM_STORE_HANDSHAKE_TIMEOUT", "0");
    TCPStore master("127.0.0.1", 0, -1, true, 30s, false);
    RawConn silent(master.port());
    EXPECT_FALSE(silent.closed_by_server(300ms));
    master.set("k", std::string_view("v"));
    EXPECT_EQ(master.get_string("k"), "v");
  }
  ScopedEnv bad("TPCOMM_STORE_HANDSHAKE_TIMEOUT", "soon");
  try {
    TCPStore master("127.0.0.1", 0, -1, true, 30s, false);
    FAIL() << "a malformed TPCOMM_STORE_HANDSHAKE_TIMEOUT was accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "TPCOMM_STORE_HANDSHAKE_TIMEOUT")) << e.what();
  }
}

}  // namespace
}  // namespace tpcomm
