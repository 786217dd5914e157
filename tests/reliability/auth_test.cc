// Shared secret (TPCOMM_AUTH_SECRET / TPCOMM_AUTH_SECRET_FILE): tcp data connections prove
// knowledge of it by challenge and response; the same secret connects, a different one, or
// one on a single side, is refused with an error naming the secret on both sides.
#include "core/auth.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>

#include "common/multiproc.h"
#include "tpcomm/tpcomm.hpp"

namespace tpcomm::testing {
namespace {

using std::chrono::seconds;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::shared_ptr<ProcessGroup> tcp_world(RankContext& c) {
  InitOptions o;
  o.backend = "tcp";
  o.timeout = seconds(30);
  return ProcessGroup::create(c.store, c.rank, c.world_size, o);
}

// Each rank sends one int to the other; returns "" or the error.
std::string exchange(ProcessGroup& pg) {
  int peer = 1 - pg.rank();
  int32_t x = pg.rank(), y = -1;
  try {
    auto rw = pg.irecv(Tensor::of(&y, 1), peer, 5);
    pg.send(Tensor::of(&x, 1), peer, 5);
    rw->wait(std::chrono::milliseconds(5000));
    EXPECT_EQ(y, peer);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

RunOptions secrets(const std::string& s0, const std::string& s1) {
  RunOptions opt;
  opt.timeout = std::chrono::milliseconds(60000);
  opt.rank_env = [=](int rank) {
    return std::map<std::string, std::string>{{"TPCOMM_AUTH_SECRET", rank == 0 ? s0 : s1}};
  };
  return opt;
}

TEST(Auth, SameSecretConnects) {
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        auto pg = tcp_world(c);
        EXPECT_EQ(exchange(*pg), "");
        c.store->set("ok/" + std::to_string(c.rank), "1");
        c.store->wait({"ok/0", "ok/1"});
        pg->destroy();
      },
      secrets("correct horse", "correct horse"));
  EXPECT_RANKS_OK(r);
}

// `sender` connects to the other rank and sends; returns its error ("" if none). The other
// rank only accepts (one connection attempt, so the error is the handshake's).
std::string one_way(RankContext& c, const std::string& prefix, int sender) {
  InitOptions o;
  o.backend = "tcp";
  o.timeout = seconds(30);
  auto store = std::make_shared<PrefixStore>(prefix, c.store);
  auto pg = ProcessGroup::create(store, c.rank, c.world_size, o);
  std::string err;
  if (c.rank == sender) {
    int32_t x = 1;
    try {
      pg->send(Tensor::of(&x, 1), 1 - sender, 5);
    } catch (const Error& e) {
      err = e.what();
    }
    store->set("sent", "1");
  }
  store->wait({"sent"});
  pg->destroy();
  return err;
}

// The acceptor refuses a wrong proof (and logs a WARN naming the connecting rank); the
// connecting rank's send fails saying so. Either rank may be the one connecting.
TEST(Auth, WrongSecretIsRefused) {
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        for (int sender : {0, 1}) {
          std::string err = one_way(c, "w" + std::to_string(sender), sender);
          if (c.rank != sender) continue;
          EXPECT_TRUE(contains(err, "failed the shared-secret challenge")) << err;
          EXPECT_TRUE(contains(err, "TPCOMM_AUTH_SECRET differs")) << err;
        }
      },
      secrets("alpha", "beta"));
  EXPECT_RANKS_OK(r);
}

// Rank 0 has a secret, rank 1 none: each direction fails with its own clear reason.
TEST(Auth, SecretOnOneSideOnlyIsRefused) {
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        // Rank 1 (no secret) connects to rank 0, which challenges it.
        std::string err = one_way(c, "a", 1);
        if (c.rank == 1) {
          EXPECT_TRUE(contains(err, "rank 0 requires the job's shared secret")) << err;
          EXPECT_TRUE(contains(err, "this rank has no TPCOMM_AUTH_SECRET")) << err;
        }
        // Rank 0 connects to rank 1, which does not challenge: rank 0 refuses to go on.
        err = one_way(c, "b", 0);
        if (c.rank == 0) {
          EXPECT_TRUE(contains(err, "without asking for the shared secret")) << err;
        }
      },
      secrets("alpha", ""));
  EXPECT_RANKS_OK(r);
}

TEST(Auth, SecretFromAFile) {
  RunOptions opt;
  opt.timeout = std::chrono::milliseconds(60000);
  auto r = run_ranks(
      2,
      [&](RankContext& c) {
        std::string path = c.dir + "/secret" + std::to_string(c.rank);
        std::ofstream(path) << "s3cret\n";
        setenv("TPCOMM_AUTH_SECRET_FILE", path.c_str(), 1);
        config::reload();
        EXPECT_EQ(auth::job_secret(), "s3cret");
        auto pg = tcp_world(c);
        EXPECT_EQ(exchange(*pg), "");
        c.store->set("ok/" + std::to_string(c.rank), "1");
        c.store->wait({"ok/0", "ok/1"});
        pg->destroy();
        // A file that cannot be read is a configuration error naming the variable.
        setenv("TPCOMM_AUTH_SECRET_FILE", (c.dir + "/missing").c_str(), 1);
        config::reload();
        try {
          auth::job_secret();
          ADD_FAILURE() << "no error for a missing secret file";
        } catch (const ConfigError& e) {
          EXPECT_TRUE(contains(e.what(), "TPCOMM_AUTH_SECRET_FILE")) << e.what();
        }
      },
      opt);
  EXPECT_RANKS_OK(r);
}

// ---- the TCPStore ----------------------------------------------------------------------

void use_secret(const char* secret) {
  if (secret)
    setenv("TPCOMM_AUTH_SECRET", secret, 1);
  else
    unsetenv("TPCOMM_AUTH_SECRET");
  config::reload();
}

// The StoreError of connecting a client under `client_secret` to `port` ("" if it connects).
std::string connect_error(uint16_t port, const char* client_secret) {
  use_secret(client_secret);
  try {
    TCPStore client("127.0.0.1", port, -1, false, seconds(20));
    client.set("k", "v");
    EXPECT_EQ(client.get_string("k"), "v");
  } catch (const StoreError& e) {
    return e.what();
  }
  return "";
}

class StoreAuth : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    setenv("TPCOMM_STORE_LOCAL_SOCKET", GetParam() ? "1" : "0", 1);
    config::reload();
  }
  void TearDown() override {
    unsetenv("TPCOMM_STORE_LOCAL_SOCKET");
    use_secret(nullptr);
  }
};

TEST_P(StoreAuth, SameSecretConnectsOthersAreRefused) {
  use_secret("s1");
  TCPStore server("127.0.0.1", 0, -1, true, seconds(20), false);
  uint16_t port = server.port();
  EXPECT_EQ(connect_error(port, "s1"), "");
  std::string err = connect_error(port, "other");
  EXPECT_TRUE(contains(err, "failed the shared-secret challenge")) << err;
  EXPECT_TRUE(contains(err, "TPCOMM_AUTH_SECRET differs")) << err;
  err = connect_error(port, nullptr);
  EXPECT_TRUE(contains(err, "requires the job's shared secret")) << err;
  EXPECT_TRUE(contains(err, "this client has no TPCOMM_AUTH_SECRET")) << err;
  // The server still serves its own client.
  server.set("x", "1");
  EXPECT_EQ(server.get_string("x"), "1");
}

TEST_P(StoreAuth, ClientWithASecretRefusesAServerWithout) {
  use_secret(nullptr);
  TCPStore server("127.0.0.1", 0, -1, true, seconds(20), false);
  std::string err = connect_error(server.port(), "s1");
  EXPECT_TRUE(contains(err, "without asking for the shared secret")) << err;
}

INSTANTIATE_TEST_SUITE_P(Auth, StoreAuth, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "local_socket" : "tcp"; });

}  // namespace
}  // namespace tpcomm::testing
