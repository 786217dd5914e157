// Rendezvous: URL parsing, the env://, tcp:// and file:// schemes with several ranks, every
// error message, and a custom scheme.
#include "tpcomm/rendezvous.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <thread>

#include "common/reserved_port.h"
#include "core/config.h"
#include "net/socket.h"
#include "rendezvous/url.h"
#include "tpcomm/error.hpp"

namespace tpcomm {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Runs f expecting an exception of type E whose message contains every one of `parts`.
template <typename E>
void expect_error(const std::function<void()>& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning '" << *parts.begin() << "'";
  } catch (const E& e) {
    std::string m = e.what();
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << m;
  }
}

// Runs fn(rank) on world_size threads; rethrows the first failure.
void run_ranks(int world_size, const std::function<void(int)>& fn) {
  std::vector<std::thread> ts;
  std::vector<std::exception_ptr> errs(world_size);
  for (int r = 0; r < world_size; ++r) {
    ts.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errs[r] = std::current_exception();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (auto& e : errs)
    if (e) std::rethrow_exception(e);
}

// Every rank publishes its rank, then reads every other rank's. Rank 0, which may host the
// store, returns after every other rank is done with it.
void exchange(Store& s, int rank, int world_size) {
  s.set("rank" + std::to_string(rank), std::to_string(rank));
  for (int p = 0; p < world_size; ++p)
    EXPECT_EQ(s.get_string("rank" + std::to_string(p)), std::to_string(p));
  s.set("left" + std::to_string(rank), std::string_view("1"));
  if (rank == 0) {
    std::vector<std::string> all;
    for (int p = 0; p < world_size; ++p) all.push_back("left" + std::to_string(p));
    s.wait(all, 60s);
  }
}

const char* const kEnvVars[] = {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE",
                                "TPCOMM_USE_AGENT_STORE"};

class RendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clear_env();
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/tpcomm-rdzv-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    clear_env();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static void clear_env() {
    for (const char* v : kEnvVars) ::unsetenv(v);
    config::reload();
  }
  static void set_env(const char* name, const std::string& value) {
    ::setenv(name, value.c_str(), 1);
    config::reload();
  }

  std::string dir_;
};

// ---- URL parsing ----

TEST(RendezvousUrl, ParsesHostPortPathAndQuery) {
  auto u = rdzv::parse_url("TCP://node1:29500?rank=2&world_size=4");
  EXPECT_EQ(u.scheme, "tcp");
  EXPECT_EQ(u.host, "node1");
  ASSERT_TRUE(u.port);
  EXPECT_EQ(*u.port, 29500);
  EXPECT_EQ(u.query.at("rank"), "2");
  EXPECT_EQ(u.query.at("world_size"), "4");

  auto v6 = rdzv::parse_url("tcp://[fe80::1%25eth0]:0");
  EXPECT_EQ(v6.host, "fe80::1%eth0");
  EXPECT_EQ(*v6.port, 0);

  auto f = rdzv::parse_url("file:///shared/my%20job/store%3F?world_size=2");
  EXPECT_EQ(f.host, "");
  EXPECT_FALSE(f.port);
  EXPECT_EQ(f.path, "/shared/my job/store?");
  EXPECT_EQ(f.query.at("world_size"), "2");

  auto e = rdzv::parse_url("env://");
  EXPECT_EQ(e.scheme, "env");
  EXPECT_TRUE(e.host.empty() && e.path.empty() && e.query.empty());
}

TEST(RendezvousUrl, MalformedUrlsNameTheProblem) {
  expect_error<InvalidArgument>([] { rdzv::parse_url("localhost:29500"); }, {"no scheme"});
  expect_error<InvalidArgument>([] { rdzv::parse_url("tcp://h:70000"); }, {"bad port '70000'"});
  expect_error<InvalidArgument>([] { rdzv::parse_url("tcp://h:12ab"); }, {"bad port '12ab'"});
  expect_error<InvalidArgument>([] { rdzv::parse_url("tcp://h:"); }, {"bad port ''"});
  expect_error<InvalidArgument>([] { rdzv::parse_url("tcp://::1:29500"); },
                                {"IPv6 hosts go in brackets"});
  expect_error<InvalidArgument>([] { rdzv::parse_url("tcp://[::1:29500"); }, {"not closed"});
  expect_error<InvalidArgument>([] { rdzv::parse_url("tcp://[::1]x"); }, {"after the IPv6"});
  expect_error<InvalidArgument>([] { rdzv::parse_url("file:///a%zzb"); },
                                {"bad percent-escape '%zz'"});
  expect_error<InvalidArgument>([] { rdzv::parse_url("tcp://h:1?rank"); },
                                {"bad query parameter 'rank'"});
  expect_error<InvalidArgument>([] { rdzv::parse_url("tcp://h:1?rank=1&rank=2"); },
                                {"'rank' is given twice"});
  expect_error<InvalidArgument>([] { rdzv::parse_url("1tcp://h:1"); }, {"invalid scheme"});
}

// ---- file:// ----

TEST_F(RendezvousTest, FileSchemeWithThreads) {
  constexpr int kWorld = 4;
  std::string path = dir_ + "/my store";
  std::string url = "file://" + dir_ + "/my%20store?world_size=" + std::to_string(kWorld);
  run_ranks(kWorld, [&](int r) {
    RendezvousResult res = rendezvous(url, r, -1, 60s);
    EXPECT_EQ(res.rank, r);
    EXPECT_EQ(res.world_size, kWorld);
    ASSERT_NE(dynamic_cast<FileStore*>(res.store.get()), nullptr);
    EXPECT_EQ(res.store->timeout(), 60s);
    exchange(*res.store, r, kWorld);
  });
  // Each rank's store was dropped: the last of world_size removed the file.
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(RendezvousTest, FileSchemeTakesRankFromTheUrl) {
  auto res = rendezvous("file://" + dir_ + "/s?rank=0&world_size=1");
  EXPECT_EQ(res.rank, 0);
  EXPECT_EQ(res.world_size, 1);
  // An argument that agrees with the URL is fine.
  auto again = rendezvous("file://" + dir_ + "/t?rank=0&world_size=1", 0, 1);
  EXPECT_EQ(again.rank, 0);
}

TEST_F(RendezvousTest, FileSchemeErrors) {
  std::string base = "file://" + dir_ + "/s";
  expect_error<InvalidArgument>([&] { rendezvous(base + "?world_size=2"); },
                                {"file:// needs rank", "?rank=R"});
  expect_error<InvalidArgument>([&] { rendezvous(base, 0); },
                                {"file:// needs world_size", "?world_size=N"});
  expect_error<InvalidArgument>([&] { rendezvous(base + "?rank=1&world_size=2", 0); },
                                {"rank is 1 in the URL but 0 was passed"});
  expect_error<InvalidArgument>([&] { rendezvous(base + "?world_size=2", -1, 3); },
                                {"world_size is 2 in the URL but 3 was passed"});
  expect_error<InvalidArgument>([&] { rendezvous(base + "?rank=2&world_size=2"); },
                                {"rank 2 is outside [0, 2)"});
  expect_error<InvalidArgument>([&] { rendezvous(base + "?rank=x&world_size=2"); },
                                {"bad rank 'x'"});
  expect_error<InvalidArgument>([&] { rendezvous(base + "?rank=0&world_size=0"); },
                                {"world_size 0 is invalid"});
  expect_error<InvalidArgument>([&] { rendezvous(base + "?rank=0&wrld_size=1"); },
                                {"unknown query parameter 'wrld_size'"});
  expect_error<InvalidArgument>([&] { rendezvous("file://?rank=0&world_size=1"); },
                                {"file:// needs the path"});
  expect_error<InvalidArgument>([&] { rendezvous("file://host/x?rank=0&world_size=1"); },
                                {"three slashes", "'host'"});
  expect_error<StoreError>([&] { rendezvous("file://" + dir_ + "/no/dir/s?rank=0&world_size=1"); },
                           {"does not exist"});
  expect_error<InvalidArgument>([&] { rendezvous(base, -2, 1); }, {"rank -2 is invalid"});
  expect_error<InvalidArgument>([&] { rendezvous(base, 0, 0); }, {"world_size 0 is invalid"});
}

// ---- tcp:// ----

TEST_F(RendezvousTest, TcpSchemeWithThreads) {
  constexpr int kWorld = 3;
  // Rank 0 binds it, but only inside rendezvous(), while the other ranks already connect.
  testing::ReservedPort reserved;
  const uint16_t port = reserved.port();
  std::string url = "tcp://127.0.0.1:" + std::to_string(port) + "?world_size=3";
  run_ranks(kWorld, [&](int r) {
    RendezvousResult res = rendezvous(url, r, -1, 60s);
    EXPECT_EQ(res.rank, r);
    EXPECT_EQ(res.world_size, kWorld);
    auto* tcp = dynamic_cast<TCPStore*>(res.store.get());
    ASSERT_NE(tcp, nullptr);
    EXPECT_EQ(tcp->port(), port);
    exchange(*res.store, r, kWorld);
  });
}

TEST_F(RendezvousTest, TcpSchemeSingleRankOnPortZero) {
  auto res = rendezvous("tcp://127.0.0.1:0?rank=0&world_size=1", -1, -1, 30s);
  auto* tcp = dynamic_cast<TCPStore*>(res.store.get());
  ASSERT_NE(tcp, nullptr);
  EXPECT_NE(tcp->port(), 0);
  res.store->set("k", std::string_view("v"));
  EXPECT_EQ(res.store->get_string("k"), "v");
}

TEST_F(RendezvousTest, TcpSchemeErrors) {
  expect_error<InvalidArgument>([] { rendezvous("tcp://127.0.0.1?rank=0&world_size=1"); },
                                {"tcp:// needs host:port"});
  expect_error<InvalidArgument>([] { rendezvous("tcp://:29500?rank=0&world_size=1"); },
                                {"tcp:// needs host:port"});
  expect_error<InvalidArgument>([] { rendezvous("tcp://h:99999?rank=0&world_size=1"); },
                                {"bad port '99999'"});
  expect_error<InvalidArgument>([] { rendezvous("tcp://h:1/path?rank=0&world_size=1"); },
                                {"takes no path"});
  expect_error<InvalidArgument>([] { rendezvous("tcp://h:1?world_size=2"); },
                                {"tcp:// needs rank"});
  expect_error<InvalidArgument>([] { rendezvous("tcp://h:1", 0); }, {"tcp:// needs world_size"});
  expect_error<InvalidArgument>([] { rendezvous("tcp://h:1?rank=5", -1, 4); },
                                {"rank 5 is outside [0, 4)"});
  expect_error<InvalidArgument>([] { rendezvous("tcp://h:1?rank=0&world_size=1&x=1"); },
                                {"unknown query parameter 'x'"});
}

// ---- env:// ----

// The launcher's way: a TCPStore already serves at MASTER_ADDR:MASTER_PORT and every rank,
// rank 0 included, connects as a client.
TEST_F(RendezvousTest, EnvSchemeWithAgentStore) {
  constexpr int kWorld = 3;
  TCPStoreOptions opts;
  opts.is_master = true;
  opts.wait_for_workers = false;
  opts.world_size = kWorld;
  opts.timeout = 60s;
  TCPStore agent("127.0.0.1", 0, opts);
  ASSERT_NE(agent.port(), 0);
  set_env("MASTER_ADDR", "127.0.0.1");
  set_env("MASTER_PORT", std::to_string(agent.port()));
  set_env("WORLD_SIZE", std::to_string(kWorld));
  set_env("RANK", "1");  // overridden by the rank argument
  set_env("TPCOMM_USE_AGENT_STORE", "1");
  run_ranks(kWorld, [&](int r) {
    RendezvousResult res = rendezvous("env://", r, -1, 60s);
    EXPECT_EQ(res.rank, r);
    EXPECT_EQ(res.world_size, kWorld);
    exchange(*res.store, r, kWorld);
  });
  agent.set_timeout(10s);
  EXPECT_EQ(agent.get_string("rank2"), "2");
}

// Rank 0 hosts the store; RANK and WORLD_SIZE come from the environment.
TEST_F(RendezvousTest, EnvSchemeRankZeroHostsTheStore) {
  set_env("MASTER_ADDR", "127.0.0.1");
  set_env("MASTER_PORT", "0");
  set_env("RANK", "0");
  set_env("WORLD_SIZE", "1");
  auto res = rendezvous("env://", -1, -1, 30s);
  EXPECT_EQ(res.rank, 0);
  EXPECT_EQ(res.world_size, 1);
  auto* tcp = dynamic_cast<TCPStore*>(res.store.get());
  ASSERT_NE(tcp, nullptr);
  EXPECT_NE(tcp->port(), 0);
  res.store->set("k", std::string_view("v"));
  EXPECT_EQ(res.store->get_string("k"), "v");
}

TEST_F(RendezvousTest, EnvSchemeWithThreadsOnAFreePort) {
  constexpr int kWorld = 2;
  set_env("MASTER_ADDR", "127.0.0.1");
  testing::ReservedPort reserved;  // rank 0 binds it inside rendezvous()
  set_env("MASTER_PORT", std::to_string(reserved.port()));
  run_ranks(kWorld, [&](int r) {
    RendezvousResult res = rendezvous("env://?world_size=2", r, -1, 60s);
    exchange(*res.store, r, kWorld);
  });
}

TEST_F(RendezvousTest, EnvSchemeErrors) {
  expect_error<InvalidArgument>([] { rendezvous("env://", 0, 1); },
                                {"env:// needs MASTER_ADDR: set it, or start the job with tprun"});
  set_env("MASTER_ADDR", "127.0.0.1");
  expect_error<InvalidArgument>([] { rendezvous("env://", 0, 1); },
                                {"env:// needs MASTER_PORT: set it, or start the job with tprun"});
  set_env("MASTER_PORT", "not-a-port");
  expect_error<ConfigError>([] { rendezvous("env://", 0, 1); }, {"MASTER_PORT", "not-a-port"});
  set_env("MASTER_PORT", "70000");
  expect_error<ConfigError>([] { rendezvous("env://", 0, 1); }, {"MASTER_PORT", "0..65535"});
  set_env("MASTER_PORT", "29500");
  expect_error<InvalidArgument>([] { rendezvous("env://"); }, {"env:// needs WORLD_SIZE", "tprun"});
  set_env("WORLD_SIZE", "2");
  expect_error<InvalidArgument>([] { rendezvous("env://"); }, {"env:// needs RANK", "tprun"});
  set_env("RANK", "2");
  expect_error<InvalidArgument>([] { rendezvous("env://"); }, {"rank 2 is outside [0, 2)"});
  expect_error<InvalidArgument>([] { rendezvous("env://?rank=1", 0); },
                                {"rank is 1 in the URL but 0 was passed"});
  expect_error<InvalidArgument>([] { rendezvous("env://host:1", 0); },
                                {"env:// takes no host", "MASTER_ADDR"});
}

// ---- registry ----

TEST_F(RendezvousTest, UnknownSchemeListsRegisteredOnes) {
  expect_error<InvalidArgument>([] { rendezvous("nope://x", 0, 1); },
                                {"unknown scheme 'nope'", "env", "file", "tcp"});
  expect_error<InvalidArgument>([] { rendezvous("no-scheme-here", 0, 1); }, {"no scheme"});
}

TEST_F(RendezvousTest, CustomSchemeHandler) {
  auto shared = std::make_shared<HashStore>();
  std::string seen_url;
  register_rendezvous_handler("Mem", [&](const std::string& url, int rank, int world_size,
                                         std::chrono::milliseconds timeout) {
    seen_url = url;
    auto u = rdzv::parse_url(url);
    RendezvousResult r;
    r.store = shared;
    r.rank = rank;
    r.world_size = world_size == -1 ? std::stoi(u.query.at("n")) : world_size;
    return r;
  });
  auto res = rendezvous("mem://pool?n=2", 1);
  EXPECT_EQ(seen_url, "mem://pool?n=2");
  EXPECT_EQ(res.store, shared);
  EXPECT_EQ(res.rank, 1);
  EXPECT_EQ(res.world_size, 2);
  expect_error<InvalidArgument>([] { rendezvous("nope://x", 0, 1); }, {"mem"});
  // A handler's result is checked.
  expect_error<InvalidArgument>([] { rendezvous("mem://pool?n=2", 5); },
                                {"handler of scheme 'mem'", "rank 5"});
  EXPECT_THROW(register_rendezvous_handler("mem", nullptr), InvalidArgument);
  EXPECT_THROW(
      register_rendezvous_handler("bad scheme", [](auto&&...) { return RendezvousResult{}; }),
      InvalidArgument);
}

}  // namespace
}  // namespace tpcomm
