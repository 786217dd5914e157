// TCPStore: every operation, waits and timeouts, handshake refusals, limits, a server that
// goes away, wait_for_workers, the tpstore program.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/reserved_port.h"
#include "store/tcp_store_client.h"
#include "store/tcp_store_server.h"
#include "store/tcp_store_test_util.h"
#include "tpcomm/error.hpp"
#include "tpcomm/store.hpp"

namespace tpcomm {
namespace {

using namespace std::chrono_literals;
using testing::RawConn;
using testing::ScopedEnv;
using testing::TpstoreProcess;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A master store on an ephemeral port, not waiting for workers.
std::unique_ptr<TCPStore> make_master(std::chrono::milliseconds timeout = 30s) {
  return std::make_unique<TCPStore>("127.0.0.1", 0, -1, true, timeout, false);
}

std::unique_ptr<TCPStore> make_client(uint16_t port, std::chrono::milliseconds timeout = 30s) {
  return std::make_unique<TCPStore>("127.0.0.1", port, -1, false, timeout);
}

TEST(TCPStore, EveryOperation) {
  auto s = make_master();
  ASSERT_NE(s->port(), 0);
  s->set("a", std::string_view("1"));
  EXPECT_EQ(s->get_string("a"), "1");
  EXPECT_EQ(s->add("c", 5), 5);
  EXPECT_EQ(s->add("c", -2), 3);
  EXPECT_EQ(s->get_string("c"), "3");
  s->set("x", std::string_view("zz"));
  EXPECT_THROW(s->add("x", 1), StoreError);
  EXPECT_TRUE(s->check({"a", "c"}));
  EXPECT_FALSE(s->check({"a", "nope"}));
  EXPECT_EQ(s->num_keys(), 3);
  EXPECT_TRUE(s->delete_key("a"));
  EXPECT_FALSE(s->delete_key("a"));
  EXPECT_EQ(s->num_keys(), 2);
  s->append("l", to_bytes("ab"));
  s->append("l", to_bytes("cd"));
  EXPECT_EQ(s->get_string("l"), "abcd");
  s->multi_set({"m1", "m2"}, {to_bytes("x"), to_bytes("y")});
  auto got = s->multi_get({"m2", "m1"});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(to_string(got[0]), "y");
  EXPECT_EQ(to_string(got[1]), "x");
  EXPECT_THROW(s->multi_set({"a"}, {}), InvalidArgument);
  // Empty keys and values, binary values.
  s->set("", Bytes{});
  EXPECT_TRUE(s->get("").empty());
  Bytes bin = {0, 1, 255, 0, 7};
  s->set("bin", bin);
  EXPECT_EQ(s->get("bin"), bin);
  s->wait({"m1", "bin"});
  EXPECT_TRUE(s->multi_get({}).empty());
}

TEST(TCPStore, CompareSetFollowsTorch) {
  auto s = make_master();
  EXPECT_EQ(to_string(s->compare_set("k", to_bytes("x"), to_bytes("y"))), "x");  // absent
  EXPECT_FALSE(s->check({"k"}));
  EXPECT_EQ(to_string(s->compare_set("k", {}, to_bytes("y"))), "y");  // absent, empty expected
  EXPECT_EQ(to_string(s->compare_set("k", to_bytes("z"), to_bytes("w"))), "y");  // mismatch
  EXPECT_EQ(to_string(s->compare_set("k", to_bytes("y"), to_bytes("w"))), "w");  // match
  EXPECT_EQ(s->get_string("k"), "w");
}

TEST(TCPStore, AddOnNonCounterNamesKeyAndKeepsConnection) {
  auto s = make_master();
  s->set("text", std::string_view("hello"));
  try {
    s->add("text", 1);
    FAIL() << "add on text did not throw";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "'text'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "not a decimal integer")) << e.what();
  }
  EXPECT_EQ(s->add("n", 2), 2);
}

TEST(TCPStore, ClientsShareDataAndLargeValues) {
  auto m = make_master();
  auto c = make_client(m->port());
  c->set("from-client", std::string_view("v"));
  EXPECT_EQ(m->get_string("from-client"), "v");
  Bytes big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 31 + 7);
  m->set("big", big);
  EXPECT_EQ(c->get("big"), big);
  auto both = c->multi_get({"big", "from-client"});
  EXPECT_EQ(both[0], big);
  EXPECT_EQ(c->num_keys(), 2);
}

TEST(TCPStore, GetIsParkedUntilTheKeyIsSet) {
  auto m = make_master();
  auto c = make_client(m->port());
  std::atomic<bool> set_called{false};
  std::thread setter([&] {
    std::this_thread::sleep_for(200ms);
    set_called = true;
    m->set("late", std::string_view("here"));
  });
  EXPECT_EQ(c->get_string("late"), "here");
  EXPECT_TRUE(set_called.load());
  setter.join();
}

TEST(TCPStore, WaitTimesOutNamingMissingKeysAndStaysUsable) {
  auto m = make_master();
  auto c = make_client(m->port());
  m->set("here", std::string_view("1"));
  try {
    c->wait({"here", "missing"}, 200ms);
    FAIL() << "wait did not time out";
  } catch (const TimeoutError& e) {
    std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "'missing'")) << msg;
    EXPECT_FALSE(contains(msg, "'here'")) << msg;
    EXPECT_TRUE(contains(msg, "127.0.0.1:" + std::to_string(m->port()))) << msg;
  }
  // The cancelled wait must not answer later requests.
  m->set("missing", std::string_view("now"));
  EXPECT_EQ(c->add("ctr", 7), 7);
  EXPECT_EQ(c->get_string("missing"), "now");
  // get() times out through set_timeout too.
  c->set_timeout(150ms);
  EXPECT_THROW(c->get("never"), TimeoutError);
  EXPECT_THROW(c->multi_get({"missing", "never"}), TimeoutError);
  EXPECT_EQ(c->add("ctr", 1), 8);
}

// A scripted fake server: answers the first request late, after the client gave up.
TEST(TCPStore, LateReplyIsNotTakenForTheNextOne) {
  ScopedEnv tcp_only("TPCOMM_STORE_LOCAL_SOCKET", "0");  // one hello, on this socket
  net::Fd lfd = net::listen_on("127.0.0.1", 0, 4, false);
  uint16_t port = net::local_address(lfd.get()).port();
  std::thread server([&] {
    int fd = ::accept(lfd.get(), nullptr, nullptr);
    ASSERT_GE(fd, 0);
    net::Fd conn(fd);
    store_wire::Limits lim;
    auto read_req = [&](store_wire::Header* h, std::vector<uint8_t>* payload) {
      uint8_t hdr[store_wire::kHeaderSize];
      net::read_all(fd, hdr, sizeof(hdr), Deadline::after(10s), "client");
      ASSERT_EQ(store_wire::decode_header(hdr, sizeof(hdr), lim, h), store_wire::HeaderStatus::kOk);
      payload->resize(h->length);
      net::read_all(fd, payload->data(), payload->size(), Deadline::after(10s), "client");
    };
    auto send = [&](const std::vector<uint8_t>& b) {
      net::write_all(fd, b.data(), b.size(), Deadline::after(10s), "client");
    };
    store_wire::Header h;
    std::vector<uint8_t> payload;
    read_req(&h, &payload);  // hello
    std::vector<uint8_t> out;
    store_wire::Writer w(&out);
    w.begin(store_wire::Op::kHelloOk, h.id);
    w.str("fake");
    w.u64(4096);
    w.u64(1 << 20);
    w.str("");  // no local socket
    w.end();
    send(out);
    read_req(&h, &payload);  // add #1: answered only after the client's timeout
    uint32_t first = h.id;
    read_req(&h, &payload);  // add #2 arrives after the client gave up on #1
    out.clear();
    w.begin(store_wire::Op::kInt, first);
    w.i64(111);
    w.end();
    w.begin(store_wire::Op::kInt, h.id);
    w.i64(222);
    w.end();
    send(out);
    // Keep the connection open until the client is done.
    uint8_t b;
    ::recv(fd, &b, 1, 0);
  });
  {
    TCPStore c("127.0.0.1", port, -1, false, 10s);
    c.set_timeout(200ms);
    EXPECT_THROW(c.add("k", 1), TimeoutError);
    c.set_timeout(10s);
    EXPECT_EQ(c.add("k", 1), 222);
  }
  server.join();
}

TEST(TCPStore, ClientSideLimitsNameTheVariable) {
  ScopedEnv k("TPCOMM_STORE_MAX_KEY", "32");
  ScopedEnv v("TPCOMM_STORE_MAX_VALUE", "1K");
  auto s = make_master();
  try {
    s->set(std::string(33, 'k'), std::string_view("v"));
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "TPCOMM_STORE_MAX_KEY=32")) << e.what();
  }
  try {
    s->set("k", Bytes(1025));
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "TPCOMM_STORE_MAX_VALUE=1024")) << e.what();
  }
  EXPECT_THROW(s->multi_set({"a", "b"}, {Bytes(700), Bytes(700)}), StoreError);
  EXPECT_THROW(s->get(std::string(40, 'g')), StoreError);
  s->set("k", Bytes(1024));
  EXPECT_EQ(s->get("k").size(), 1024u);
  s->append("ap", Bytes(1000));
  s->append("ap", Bytes(100));  // grows over the limit: refused by the server, reported later
  try {
    s->num_keys();
    FAIL() << "the failed append was not reported";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "earlier")) << e.what();
    EXPECT_TRUE(contains(e.what(), "TPCOMM_STORE_MAX_VALUE")) << e.what();
  }
  EXPECT_EQ(s->get("ap").size(), 1000u);
}

TEST(TCPStore, ServerRefusesOverLimitRequestsAndKeepsTheConnection) {
  ScopedEnv k("TPCOMM_STORE_MAX_KEY", "32");
  ScopedEnv v("TPCOMM_STORE_MAX_VALUE", "1K");
  auto s = make_master();
  RawConn raw(s->port());
  raw.hello();
  // Key over the limit: an error reply naming the variable, then business as usual.
  raw.send_bytes(testing::frame(store_wire::Op::kGet, 2, {std::string(100, 'k')}));
  auto f = raw.read_frame();
  EXPECT_EQ(f.op, static_cast<uint8_t>(store_wire::Op::kError));
  EXPECT_EQ(f.id, 2u);
  EXPECT_TRUE(contains(f.text, "TPCOMM_STORE_MAX_KEY")) << f.text;
  // A frame longer than the limit: refused from its header, its payload skipped.
  auto big = testing::frame(store_wire::Op::kSet, 3, {"k", std::string(5000, 'v')});
  raw.send_bytes(big);
  f = raw.read_frame();
  EXPECT_EQ(f.op, static_cast<uint8_t>(store_wire::Op::kError));
  EXPECT_EQ(f.id, 3u);
  EXPECT_TRUE(contains(f.text, "TPCOMM_STORE_MAX_VALUE")) << f.text;
  raw.send_bytes(testing::frame(store_wire::Op::kAdd, 4, {"n"}, 5, true));
  f = raw.read_frame();
  EXPECT_EQ(f.op, static_cast<uint8_t>(store_wire::Op::kInt)) << f.text;
  EXPECT_EQ(f.integer, 5);
  EXPECT_FALSE(s->check({"k"}));
}

TEST(TCPStore, OtherJobIsRefusedWithAClearMessage) {
  TCPStoreOptions mo;
  mo.is_master = true;
  mo.wait_for_workers = false;
  mo.job_id = "job-A";
  mo.timeout = 10s;
  TCPStore m("127.0.0.1", 0, mo);
  TCPStoreOptions co;
  co.job_id = "job-B";
  co.timeout = 10s;
  try {
    TCPStore c("127.0.0.1", m.port(), co);
    FAIL() << "a client of another job was accepted";
  } catch (const StoreError& e) {
    std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "job 'job-A'")) << msg;
    EXPECT_TRUE(contains(msg, "'job-B'")) << msg;
    EXPECT_TRUE(contains(msg, "TPCOMM_JOB_ID")) << msg;
  }
  // TPCOMM_JOB_ID is the default job id.
  ScopedEnv j("TPCOMM_JOB_ID", "job-A");
  TCPStore c("127.0.0.1", m.port(), -1, false, 10s);
  c.set("ok", std::string_view("1"));
  EXPECT_EQ(m.get_string("ok"), "1");
}

TEST(TCPStore, HttpClientGetsA400AndServerKeepsServing) {
  auto m = make_master();
  RawConn raw(m->port());
  std::string req = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  raw.send_bytes(req.data(), req.size());
  ASSERT_TRUE(raw.closed_by_server());
  std::string got(raw.rbuf.begin(), raw.rbuf.end());
  EXPECT_EQ(got.rfind("HTTP/1.0 400", 0), 0u) << got;
  EXPECT_TRUE(contains(got, "tpcomm TCPStore")) << got;
  m->set("still", std::string_view("ok"));
  EXPECT_EQ(make_client(m->port())->get_string("still"), "ok");
}

TEST(TCPStore, ClientOfAnotherProgramsServerFailsClearly) {
  net::Fd lfd = net::listen_on("127.0.0.1", 0, 4, false);
  uint16_t port = net::local_address(lfd.get()).port();
  std::thread server([&] {
    net::Fd conn(::accept(lfd.get(), nullptr, nullptr));
    std::string resp = "HTTP/1.1 400 Bad Request\r\n\r\n";
    net::write_all(conn.get(), resp.data(), resp.size(), Deadline::after(10s), "client");
    uint8_t b;
    ::recv(conn.get(), &b, 1, 0);
  });
  try {
    TCPStore c("127.0.0.1", port, -1, false, 10s);
    FAIL() << "connected to an HTTP server";
  } catch (const StoreError& e) {
    std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "not a tpcomm TCPStore server")) << msg;
    EXPECT_TRUE(contains(msg, "HTTP/1.1 400")) << msg;
    EXPECT_TRUE(contains(msg, "127.0.0.1:" + std::to_string(port))) << msg;
  }
  server.join();
}

TEST(TCPStore, SilentServerTimesOutTheHandshake) {
  net::Fd lfd = net::listen_on("127.0.0.1", 0, 4, false);
  uint16_t port = net::local_address(lfd.get()).port();
  try {
    TCPStore c("127.0.0.1", port, -1, false, 300ms);  // accepted by the backlog, never answered
    FAIL() << "no handshake reply, yet constructed";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "handshake")) << e.what();
    EXPECT_TRUE(contains(e.what(), "127.0.0.1:" + std::to_string(port))) << e.what();
  }
}

TEST(TCPStore, WaitForWorkersReturnsWhenAllJoined) {
  testing::ReservedPort reserved;  // the clients need the number before the server binds
  const uint16_t port = reserved.port();
  std::atomic<bool> master_ready{false};
  std::unique_ptr<TCPStore> master;
  std::thread t([&] {
    try {
      master = std::make_unique<TCPStore>("127.0.0.1", port, 3, true, 30s, true);
      master_ready = true;
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  });
  auto w1 = make_client(port);
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(master_ready.load());  // one of two workers so far
  auto w2 = make_client(port);
  t.join();
  ASSERT_TRUE(master_ready.load());
  w1->set("k", std::string_view("v"));
  EXPECT_EQ(master->get_string("k"), "v");
}

TEST(TCPStore, WaitForWorkersTimesOutSayingHowMany) {
  testing::ReservedPort reserved;  // the clients need the number before the server binds
  const uint16_t port = reserved.port();
  std::unique_ptr<TCPStore> w1;
  std::thread t([&] {
    try {
      w1 = make_client(port, 10s);
    } catch (const Error&) {
    }
  });
  try {
    TCPStore m("127.0.0.1", port, 4, true, 3s, true);
    FAIL() << "the master did not time out";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "only 1 of 3")) << e.what();
    EXPECT_TRUE(contains(e.what(), std::to_string(port))) << e.what();
  }
  t.join();
}

TEST(TCPStore, ClientRetriesUntilTheServerStarts) {
  testing::ReservedPort reserved;  // the clients need the number before the server binds
  const uint16_t port = reserved.port();
  std::unique_ptr<TCPStore> c;
  std::thread t([&] {
    try {
      c = make_client(port, 20s);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  });
  std::this_thread::sleep_for(300ms);
  TCPStore m("127.0.0.1", port, 2, true, 20s, true);
  t.join();
  ASSERT_TRUE(c);
  c->set("k", std::string_view("v"));
  EXPECT_EQ(m.get_string("k"), "v");
}

TEST(TCPStore, ConnectTimeoutNamesTheAddress) {
  testing::ReservedPort reserved;  // the clients need the number before the server binds
  const uint16_t port = reserved.port();
  auto t0 = std::chrono::steady_clock::now();
  try {
    TCPStore c("127.0.0.1", port, -1, false, 500ms);
    FAIL();
  } catch (const TimeoutError& e) {
    std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "cannot reach 127.0.0.1:" + std::to_string(port))) << msg;
    EXPECT_TRUE(contains(msg, "last error")) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

TEST(TCPStore, ServerKilledClientFailsFastNamingHostPort) {
  TpstoreProcess srv;
  ASSERT_NE(srv.port(), 0) << "tpstore did not start (built in " TPCOMM_TEST_BIN_DIR "?)";
  auto c = make_client(srv.port(), 60s);
  auto waiter = make_client(srv.port(), 60s);
  c->set("k", std::string_view("v"));
  EXPECT_EQ(c->get_string("k"), "v");
  std::atomic<bool> wait_failed{false};
  std::string wait_msg;
  std::thread t([&] {
    try {
      waiter->wait({"never"});
    } catch (const StoreError& e) {
      wait_msg = e.what();
      wait_failed = true;
    }
  });
  std::this_thread::sleep_for(100ms);
  srv.kill_and_wait(SIGKILL);
  auto t0 = std::chrono::steady_clock::now();
  std::string where = "127.0.0.1:" + std::to_string(srv.port());
  try {
    c->get("k");
    FAIL() << "get succeeded on a dead server";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), where)) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);  // not the 60 s timeout
  t.join();
  EXPECT_TRUE(wait_failed.load());
  EXPECT_TRUE(contains(wait_msg, where)) << wait_msg;
  // Later calls fail at once with the same story.
  EXPECT_THROW(c->add("x", 1), StoreError);
}

TEST(TCPStore, MasterDestructorReleasesParkedClients) {
  auto m = make_master();
  auto c = make_client(m->port(), 60s);
  std::string msg;
  std::thread t([&] {
    try {
      c->get("never");
    } catch (const StoreError& e) {
      msg = e.what();
    }
  });
  std::this_thread::sleep_for(100ms);
  auto t0 = std::chrono::steady_clock::now();
  m.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  t.join();
  EXPECT_TRUE(contains(msg, "shutting down") || contains(msg, "closed the connection")) << msg;
}

TEST(TCPStore, ServerOnlyStoreHasNoClient) {
  TCPStoreOptions o;
  o.is_master = true;
  o.server_only = true;
  o.wait_for_workers = false;
  TCPStore s("127.0.0.1", 0, o);
  EXPECT_THROW(s.set("k", std::string_view("v")), InvalidArgument);
  auto c = make_client(s.port());
  c->set("k", std::string_view("v"));
  EXPECT_EQ(c->get_string("k"), "v");
}

TEST(TCPStore, Ipv6Loopback) {
  std::unique_ptr<TCPStore> m;
  try {
    m = std::make_unique<TCPStore>("::1", 0, -1, true, 10s, false);
  } catch (const Error& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  TCPStore c("::1", m->port(), -1, false, 10s);
  c.set("v6", std::string_view("yes"));
  EXPECT_EQ(m->get_string("v6"), "yes");
}

TEST(TCPStore, MasterOnEveryAddress) {
  TCPStore m("", 0, -1, true, 10s, false);
  TCPStore c("127.0.0.1", m.port(), -1, false, 10s);
  c.set("any", std::string_view("1"));
  EXPECT_EQ(m.get_string("any"), "1");
}

TEST(TCPStore, WorksWithAndWithoutBusyPolling) {
  // One client and a server-only master: the setting where both ends busy-poll.
  for (const char* spin : {"0", "2ms", "50us"}) {
    ScopedEnv e("TPCOMM_STORE_SPIN", spin);
    TCPStoreOptions o;
    o.is_master = true;
    o.server_only = true;
    o.wait_for_workers = false;
    TCPStore m("127.0.0.1", 0, o);
    auto c = make_client(m.port());
    for (int i = 0; i < 200; ++i) {
      c->set("k" + std::to_string(i % 4), std::to_string(i));
      EXPECT_EQ(c->get_string("k" + std::to_string(i % 4)), std::to_string(i)) << spin;
    }
    EXPECT_EQ(c->add("n", 1), 1);
    EXPECT_THROW(c->wait({"never"}, 100ms), TimeoutError);
  }
}

TEST(TCPStore, MalformedSpinSettingIsAConfigError) {
  ScopedEnv e("TPCOMM_STORE_SPIN", "fast");
  try {
    make_master();
    FAIL();
  } catch (const ConfigError& ex) {
    EXPECT_TRUE(contains(ex.what(), "TPCOMM_STORE_SPIN")) << ex.what();
  }
}

// ---- the local (Unix-domain) socket ----

// Waits until the server counts `n` open connections (the moved client's TCP one closes).
bool connections_become(const TCPStoreServer& srv, int n) {
  for (int i = 0; i < 1000 && srv.connections() != n; ++i) std::this_thread::sleep_for(10ms);
  return srv.connections() == n;
}

TEST(TCPStoreLocalSocket, ClientsOfThisHostMoveThereAndCountOnce) {
  TCPStoreServer srv(TCPStoreServerConfig::from_registry("127.0.0.1", 0, ""));
  ASSERT_FALSE(srv.local_socket_name().empty());
  EXPECT_NE(srv.local_socket_name().find(std::to_string(srv.port())), std::string::npos);
  TCPStoreClient a("127.0.0.1", srv.port(), "", 30s, false);
  TCPStoreClient b("127.0.0.1", srv.port(), "", 30s, false);
  EXPECT_TRUE(a.uses_local_socket());
  EXPECT_TRUE(b.uses_local_socket());
  a.set("k", to_bytes("v"), 30s);
  EXPECT_EQ(b.get("k", 30s), to_bytes("v"));
  EXPECT_EQ(b.add("n", 2, 30s), 2);
  EXPECT_EQ(srv.workers_joined(), 2);  // the asking TCP hello does not count
  EXPECT_TRUE(connections_become(srv, 2)) << srv.connections();
  srv.wait_for_workers(2, Deadline::after(10s), 10s);
}

TEST(TCPStoreLocalSocket, ZeroOnEitherSideKeepsTcp) {
  {
    ScopedEnv off("TPCOMM_STORE_LOCAL_SOCKET", "0");
    TCPStoreServer srv(TCPStoreServerConfig::from_registry("127.0.0.1", 0, ""));
    EXPECT_TRUE(srv.local_socket_name().empty());
    ScopedEnv on("TPCOMM_STORE_LOCAL_SOCKET", "1");
    TCPStoreClient c("127.0.0.1", srv.port(), "", 30s, false);  // asks, gets no name
    EXPECT_FALSE(c.uses_local_socket());
    c.set("k", to_bytes("v"), 30s);
    EXPECT_EQ(c.get("k", 30s), to_bytes("v"));
    EXPECT_EQ(srv.workers_joined(), 1);
  }
  TCPStoreServer srv(TCPStoreServerConfig::from_registry("127.0.0.1", 0, ""));
  ScopedEnv off("TPCOMM_STORE_LOCAL_SOCKET", "0");
  TCPStoreClient c("127.0.0.1", srv.port(), "", 30s, false);  // does not ask
  EXPECT_FALSE(c.uses_local_socket());
  EXPECT_EQ(c.add("n", 1, 30s), 1);
  EXPECT_EQ(srv.workers_joined(), 1);
}

// A client that cannot reach the local socket (another host) says hello again over TCP; a
// client of another job is refused before it learns the socket's name.
TEST(TCPStoreLocalSocket, AskingThenStayingOnTcpAndOtherJobs) {
  TCPStoreServer srv(TCPStoreServerConfig::from_registry("127.0.0.1", 0, "jobA"));
  auto hello = [](const std::string& job, uint32_t flags) {
    std::vector<uint8_t> b;
    store_wire::Writer w(&b);
    w.begin(store_wire::Op::kHello, 1);
    w.str(job);
    w.str("remote-test");
    w.u32(flags);
    w.end();
    return b;
  };
  RawConn raw(srv.port());
  raw.send_bytes(hello("jobA", store_wire::kHelloAskLocal));
  auto f = raw.read_frame();
  ASSERT_EQ(f.op, static_cast<uint8_t>(store_wire::Op::kHelloOk)) << f.text;
  EXPECT_EQ(srv.workers_joined(), 0);
  raw.send_bytes(hello("jobA", 0));
  f = raw.read_frame();
  ASSERT_EQ(f.op, static_cast<uint8_t>(store_wire::Op::kHelloOk)) << f.text;
  EXPECT_EQ(srv.workers_joined(), 1);
  raw.send_bytes(testing::frame(store_wire::Op::kAdd, 2, {"n"}, 3, true));
  f = raw.read_frame();
  EXPECT_EQ(f.op, static_cast<uint8_t>(store_wire::Op::kInt)) << f.text;
  EXPECT_EQ(f.integer, 3);
  // A third hello, once handshaken, is a protocol error.
  raw.send_bytes(hello("jobA", 0));
  f = raw.read_frame();
  EXPECT_EQ(f.op, static_cast<uint8_t>(store_wire::Op::kError));
  EXPECT_TRUE(contains(f.text, "hello sent twice")) << f.text;

  RawConn other(srv.port());
  other.send_bytes(hello("jobB", store_wire::kHelloAskLocal));
  f = other.read_frame();
  EXPECT_EQ(f.op, static_cast<uint8_t>(store_wire::Op::kError));
  EXPECT_TRUE(contains(f.text, "jobB")) << f.text;
  EXPECT_TRUE(other.closed_by_server());
  // The client class reports the refusal the same way over either socket.
  try {
    TCPStoreClient c("127.0.0.1", srv.port(), "jobB", 30s, false);
    FAIL() << "a client of another job was accepted";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "serves job 'jobA'")) << e.what();
  }
}

TEST(Tpstore, ServesAndStopsOnSigterm) {
  TpstoreProcess srv({"--job-id", "tpjob", "--world-size", "1"});
  ASSERT_NE(srv.port(), 0);
  TCPStoreOptions o;
  o.job_id = "tpjob";
  o.timeout = 10s;
  {
    TCPStore c("127.0.0.1", srv.port(), o);
    c.set("k", std::string_view("v"));
    EXPECT_EQ(c.get_string("k"), "v");
    EXPECT_EQ(srv.read_line(10s), "tpstore: all 1 clients connected");
  }
  int status = srv.kill_and_wait(SIGTERM);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(Tpstore, RejectsBadArguments) {
  std::string bin = std::string(TPCOMM_TEST_BIN_DIR) + "/tpstore";
  std::string cmd = bin + " --port notaport >/dev/null 2>&1";
  int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
}

}  // namespace
}  // namespace tpcomm
