// Logging: silent by default, levels, the subsystem filter (with ^ exclusions), the file sink
// with %h and %p, the line format, lazy evaluation, and malformed settings.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "core/config.h"
#include "core/log.h"
#include "tpcomm/error.hpp"

namespace tpcomm {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Sets the three logging variables for one test, restores them after.
class LogTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("TPCOMM_DEBUG");
    unsetenv("TPCOMM_DEBUG_SUBSYS");
    unsetenv("TPCOMM_DEBUG_FILE");
    config::reload();
    log::reload();
    if (!path_.empty()) std::remove(path_.c_str());
  }
  // Points the sink at a fresh file under /tmp and applies `level` and `subsys`.
  void configure(const char* level, const char* subsys) {
    path_ = "/tmp/tpcomm_log_test_" + std::to_string(getpid()) + ".log";
    std::remove(path_.c_str());
    if (level) setenv("TPCOMM_DEBUG", level, 1);
    else unsetenv("TPCOMM_DEBUG");
    if (subsys) setenv("TPCOMM_DEBUG_SUBSYS", subsys, 1);
    else unsetenv("TPCOMM_DEBUG_SUBSYS");
    setenv("TPCOMM_DEBUG_FILE", path_.c_str(), 1);
    config::reload();
    log::reload();
  }
  std::string path_;
};

TEST_F(LogTest, SilentByDefault) {
  configure(nullptr, nullptr);
  EXPECT_FALSE(log::enabled(log::Level::Warn, log::Subsys::STORE));
  TPLOG(WARN, STORE) << "must not appear";
  EXPECT_EQ(slurp(path_), "");
}

TEST_F(LogTest, LevelsFilterAndTheLineNamesLevelAndSubsystem) {
  configure("warn", nullptr);
  TPLOG(WARN, STORE) << "a warning";
  TPLOG(INFO, STORE) << "an info line";
  std::string out = slurp(path_);
  EXPECT_TRUE(has(out, "a warning")) << out;
  EXPECT_FALSE(has(out, "an info line")) << out;
  EXPECT_TRUE(has(out, "store")) << out;
  EXPECT_TRUE(has(out, ":" + std::to_string(getpid()) + ":")) << "host:pid:tid prefix: " << out;
  EXPECT_TRUE(has(out, "log_test.cc:")) << "file:line: " << out;
  configure("info", nullptr);
  TPLOG(INFO, NET) << "now info";
  EXPECT_TRUE(has(slurp(path_), "now info"));
}

TEST_F(LogTest, SubsystemMaskWithExclusions) {
  configure("info", "store,net");
  TPLOG(INFO, STORE) << "store line";
  TPLOG(INFO, NET) << "net line";
  TPLOG(INFO, COLL) << "coll line";
  std::string out = slurp(path_);
  EXPECT_TRUE(has(out, "store line") && has(out, "net line")) << out;
  EXPECT_FALSE(has(out, "coll line")) << out;
  configure("info", "^store");
  TPLOG(INFO, STORE) << "excluded";
  TPLOG(INFO, TOPO) << "included";
  out = slurp(path_);
  EXPECT_FALSE(has(out, "excluded")) << out;
  EXPECT_TRUE(has(out, "included")) << out;
}

TEST_F(LogTest, DisabledLinesAreNotEvaluated) {
  configure("warn", nullptr);
  int calls = 0;
  auto count = [&] { return ++calls; };
  TPLOG(INFO, STORE) << count();
  EXPECT_EQ(calls, 0);
  TPLOG(WARN, STORE) << count();
  EXPECT_EQ(calls, 1);
}

TEST_F(LogTest, FileNameSubstitutesHostAndPid) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string pattern = "/tmp/tpcomm_log_%h_%p.log";
  std::string expect = "/tmp/tpcomm_log_" + std::string(host) + "_" + std::to_string(getpid()) +
                       ".log";
  std::remove(expect.c_str());
  setenv("TPCOMM_DEBUG", "warn", 1);
  setenv("TPCOMM_DEBUG_FILE", pattern.c_str(), 1);
  config::reload();
  log::reload();
  TPLOG(WARN, INIT) << "to the substituted file";
  EXPECT_TRUE(has(slurp(expect), "to the substituted file")) << "expected " << expect;
  path_ = expect;  // removed in TearDown
}

TEST_F(LogTest, MalformedSettingsNameTheVariable) {
  setenv("TPCOMM_DEBUG", "loud", 1);
  config::reload();
  try {
    log::reload();
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(has(e.what(), "TPCOMM_DEBUG")) << e.what();
  }
  unsetenv("TPCOMM_DEBUG");
  setenv("TPCOMM_DEBUG_SUBSYS", "stor", 1);
  config::reload();
  try {
    log::reload();
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(has(e.what(), "TPCOMM_DEBUG_SUBSYS")) << e.what();
  }
}

}  // namespace
}  // namespace tpcomm
