// Socket helpers: address parsing, resolution, listening, connecting with retry, deadlines.
#include "net/socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <thread>

#include "common/reserved_port.h"
#include "tpcomm/error.hpp"

namespace tpcomm::net {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Socket, SplitHostPort) {
  EXPECT_EQ(split_host_port("node1:29500"), std::make_pair(std::string("node1"), uint16_t{29500}));
  EXPECT_EQ(split_host_port("[::1]:80"), std::make_pair(std::string("::1"), uint16_t{80}));
  EXPECT_THROW(split_host_port("node1"), InvalidArgument);
  EXPECT_THROW(split_host_port("node1:99999"), InvalidArgument);
  EXPECT_THROW(split_host_port("::1:80"), InvalidArgument);
  EXPECT_THROW(split_host_port(":80"), InvalidArgument);
  EXPECT_THROW(split_host_port("[::1]80"), InvalidArgument);
  EXPECT_EQ(join_host_port("::1", 5), "[::1]:5");
  EXPECT_EQ(join_host_port("h", 5), "h:5");
}

TEST(Socket, ResolveNamesAndLiterals) {
  auto v4 = resolve("127.0.0.1", 1234);
  ASSERT_FALSE(v4.empty());
  EXPECT_EQ(v4[0].str(), "127.0.0.1:1234");
  EXPECT_EQ(v4[0].port(), 1234);
  auto local = resolve("localhost", 1);
  EXPECT_FALSE(local.empty());
  try {
    resolve("no-such-host.invalid", 1);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "no-such-host.invalid")) << e.what();
  }
}

TEST(Socket, ListenConnectReadWrite) {
  Fd l = listen_on("127.0.0.1", 0, 16, false);
  uint16_t port = local_address(l.get()).port();
  ASSERT_NE(port, 0);
  std::thread t([&] {
    Fd c(::accept(l.get(), nullptr, nullptr));
    char buf[5];
    read_all(c.get(), buf, 5, Deadline::after(10s), "client");
    write_all(c.get(), buf, 5, Deadline::after(10s), "client");
  });
  Fd c = connect_to("127.0.0.1", port, Deadline::after(10s));
  EXPECT_EQ(peer_address(c.get()).port(), port);
  write_all(c.get(), "hello", 5, Deadline::after(10s), "server");
  char buf[6] = {0};
  read_all(c.get(), buf, 5, Deadline::after(10s), "server");
  EXPECT_STREQ(buf, "hello");
  t.join();
  // The peer is gone: EOF is a PeerError saying how much arrived.
  try {
    read_all(c.get(), buf, 4, Deadline::after(10s), "server X");
    FAIL();
  } catch (const PeerError& e) {
    EXPECT_TRUE(contains(e.what(), "server X")) << e.what();
    EXPECT_TRUE(contains(e.what(), "0 of 4")) << e.what();
  }
}

TEST(Socket, ReadTimesOut) {
  Fd l = listen_on("127.0.0.1", 0, 16, false);
  Fd c = connect_to("127.0.0.1", local_address(l.get()).port(), Deadline::after(10s));
  char buf[4];
  try {
    read_all(c.get(), buf, 4, Deadline::after(100ms), "quiet peer");
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "quiet peer")) << e.what();
  }
}

TEST(Socket, PortInUseSaysSo) {
  Fd l = listen_on("127.0.0.1", 0, 16, false);
  uint16_t port = local_address(l.get()).port();
  try {
    listen_on("127.0.0.1", port, 16, false);
    FAIL();
  } catch (const TransportError& e) {
    EXPECT_TRUE(contains(e.what(), std::to_string(port))) << e.what();
    EXPECT_TRUE(contains(e.what(), "0 to let the system pick")) << e.what();
  }
}

TEST(Socket, ConnectRetriesThenTimesOut) {
  ::tpcomm::testing::ReservedPort reserved;  // refused until the listener below appears
  const uint16_t port = reserved.port();
  auto t0 = std::chrono::steady_clock::now();
  try {
    connect_to("127.0.0.1", port, Deadline::after(300ms), 5ms);
    FAIL();
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    EXPECT_TRUE(contains(m, "cannot reach 127.0.0.1:" + std::to_string(port))) << m;
    EXPECT_TRUE(contains(m, "Connection refused")) << m;
  }
  auto el = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(el, 250ms);
  EXPECT_LT(el, 10s);
  // A server that appears during the retries is reached.
  std::thread t([&] {
    std::this_thread::sleep_for(200ms);
    Fd l = listen_on("127.0.0.1", port, 16, false);
    Fd c(::accept(l.get(), nullptr, nullptr));
  });
  Fd c = connect_to("127.0.0.1", port, Deadline::after(10s), 5ms);
  EXPECT_TRUE(c.valid());
  t.join();
}

TEST(Socket, Ipv6WhenAvailable) {
  Fd l;
  try {
    l = listen_on("::1", 0, 16, false);
  } catch (const Error& e) {
    GTEST_SKIP() << "no IPv6 loopback: " << e.what();
  }
  uint16_t port = local_address(l.get()).port();
  EXPECT_EQ(local_address(l.get()).str(), "[::1]:" + std::to_string(port));
  Fd c = connect_to("[::1]", port, Deadline::after(10s));
  EXPECT_TRUE(c.valid());
}

TEST(Socket, Hostname) { EXPECT_FALSE(hostname().empty()); }

}  // namespace
}  // namespace tpcomm::net
