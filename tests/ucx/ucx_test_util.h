// Shared parts of the UCX tests: the two UCX lanes every test runs over (UCX_TLS=tcp and
// shared memory), a fixture that skips without UCX and forces the ucx transport on a lane.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>

#include "common/transport_test_util.h"
#include "p2p/p2p_test_util.h"

namespace tpcomm::testing {

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// One UCX lane: a test-name part, its TPCOMM_UCX_TLS and, when not empty, its
/// TPCOMM_UCX_TAGGED.
struct Lane {
  std::string name;
  std::string tls;
  std::string tagged = {};
};

/// The lanes, for INSTANTIATE_TEST_SUITE_P(..., kUcxLanes, lane_name).
inline const auto kUcxLanes = ::testing::Values(Lane{"tcp", "tcp"}, Lane{"shm", "shm,self"});
inline std::string lane_name(const ::testing::TestParamInfo<Lane>& info) { return info.param.name; }

/// Skips without UCX; opts() runs ranks over the ucx transport on the test's lane.
class UcxLaneTest : public ::testing::TestWithParam<Lane> {
 protected:
  void SetUp() override {
    if (!transport::has_transport("ucx"))
      GTEST_SKIP() << "this build has no UCX (install libucx-dev and reconfigure)";
  }
  RunOptions opts() const {
    RunOptions o;
    o.timeout = std::chrono::seconds(120);
    o.env = {{"TPCOMM_UCX_TLS", GetParam().tls}, {"TPCOMM_TRANSPORT", "ucx"}};
    if (!GetParam().tagged.empty()) o.env["TPCOMM_UCX_TAGGED"] = GetParam().tagged;
    return o;
  }
};

/// Two ucx transports in this process, ranks 0 and 1, on the test's lane (closing waits only
/// 100 ms for endpoint flushes: both live on this thread), connected both ways; skips where
/// UCX cannot start.
class UcxPairTest : public UcxLaneTest {
 protected:
  /// The fixture's SetUp: skips without UCX, else make_pair(job).
  void set_up_pair(const std::string& job) {
    UcxLaneTest::SetUp();
    if (IsSkipped()) return;
    make_pair(job);
  }
  /// Progresses both transports until `pred` holds (false after `limit`).
  bool both(const std::function<bool()>& pred,
            std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    return transport::test_util::pump({{t[0].get(), &s[0]}, {t[1].get(), &s[1]}}, pred, limit);
  }
  void make_pair(const std::string& job) {
    transport::test_util::set_env("TPCOMM_UCX_TLS", GetParam().tls.c_str());
    transport::test_util::set_env("TPCOMM_UCX_CLOSE_TIMEOUT", "100ms");
    try {
      for (int r = 0; r < 2; ++r) {
        auto ctx = transport::test_util::make_ctx(r, 2, job);
        ctx.store = std::make_shared<HashStore>();
        t[r] = transport::create_transport("ucx", ctx);
      }
    } catch (const NotSupportedError& e) {
      GTEST_SKIP() << e.what();
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    ep01 = &t[0]->connect(1, t[1]->address(), deadline);
    ep10 = &t[1]->connect(0, t[0]->address(), deadline);
  }
  void TearDown() override {
    t[0].reset();
    t[1].reset();
    transport::test_util::set_env("TPCOMM_UCX_TLS", nullptr);
    transport::test_util::set_env("TPCOMM_UCX_CLOSE_TIMEOUT", nullptr);
  }
  std::unique_ptr<transport::Transport> t[2];
  transport::test_util::Sink s[2];
  transport::Endpoint* ep01 = nullptr;
  transport::Endpoint* ep10 = nullptr;
};

}  // namespace tpcomm::testing
