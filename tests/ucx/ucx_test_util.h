// Shared parts of the UCX tests: the two UCX lanes every test runs over (UCX_TLS=tcp and
// shared memory), a fixture that skips without UCX and forces the ucx transport on a lane.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>

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

}  // namespace tpcomm::testing
