#include "core/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "tpcomm/error.hpp"

namespace tpcomm::config {
namespace {

// Sets an environment variable for one test and restores the snapshot afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    setenv(name, value, 1);
    reload();
  }
  ~ScopedEnv() {
    unsetenv(name_);
    reload();
  }

 private:
  const char* name_;
};

TEST(Config, DefaultsAreTyped) {
  EXPECT_EQ(get_size("TPCOMM_BUFFSIZE"), 4u << 20);
  EXPECT_EQ(get_duration("TPCOMM_TIMEOUT"), std::chrono::seconds(300));
  EXPECT_EQ(get_enum("TPCOMM_DEBUG"), "none");
}

// Hot paths cache parsed values per generation: a reload must move it, and the value read
// after the move is the new one.
TEST(Config, GenerationMovesOnReload) {
  const uint64_t g0 = generation();
  EXPECT_EQ(generation(), g0) << "nothing changed";
  {
    ScopedEnv e("TPCOMM_BUFFSIZE", "1M");
    EXPECT_NE(generation(), g0);
    EXPECT_EQ(get_size("TPCOMM_BUFFSIZE"), 1u << 20);
  }
  EXPECT_NE(generation(), g0);
  EXPECT_EQ(get_size("TPCOMM_BUFFSIZE"), 4u << 20);
}

TEST(Config, ParsesSizesDurationsBools) {
  EXPECT_EQ(parse_size("64K"), 65536u);
  EXPECT_EQ(parse_size("4MiB"), 4u << 20);
  EXPECT_EQ(parse_size("1g"), 1ull << 30);
  EXPECT_EQ(parse_size("123"), 123u);
  EXPECT_FALSE(parse_size("12xyz"));
  EXPECT_FALSE(parse_size(""));
  EXPECT_FALSE(parse_size("-1"));
  EXPECT_EQ(parse_duration("250ms"), std::chrono::milliseconds(250));
  EXPECT_EQ(parse_duration("30"), std::chrono::seconds(30));
  EXPECT_EQ(parse_duration("5m"), std::chrono::minutes(5));
  EXPECT_EQ(parse_duration("50us"), std::chrono::milliseconds(0));
  EXPECT_FALSE(parse_duration("soon"));
  EXPECT_EQ(parse_bool("Yes"), true);
  EXPECT_EQ(parse_bool("off"), false);
  EXPECT_FALSE(parse_bool("maybe"));
}

TEST(Config, MalformedValueNamesVariableAndWhatItAccepts) {
  ScopedEnv e("TPCOMM_BUFFSIZE", "12xyz");
  try {
    (void)get_size("TPCOMM_BUFFSIZE");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& err) {
    std::string msg = err.what();
    EXPECT_NE(msg.find("TPCOMM_BUFFSIZE='12xyz'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("size in bytes"), std::string::npos) << msg;
  }
  EXPECT_THROW(validate(), ConfigError);
}

TEST(Config, EnumOutsideAllowedValuesFails) {
  ScopedEnv e("TPCOMM_DEBUG", "loud");
  EXPECT_THROW(get_enum("TPCOMM_DEBUG"), ConfigError);
}

TEST(Config, IntRangeIsEnforced) {
  ScopedEnv e("TPCOMM_STORE_BACKLOG", "0");
  EXPECT_THROW(get_int("TPCOMM_STORE_BACKLOG"), ConfigError);
}

TEST(Config, UnknownVariableGetsNearestSuggestion) {
  ScopedEnv e("TPCOMM_BUFSIZE", "4M");
  auto warnings = validate();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("TPCOMM_BUFSIZE"), std::string::npos);
  EXPECT_NE(warnings[0].find("did you mean TPCOMM_BUFFSIZE"), std::string::npos) << warnings[0];
}

// Only the documented units: "5sec" is refused, not read as 5 s.
TEST(Config, DurationWithAnUnknownUnitIsRefused) {
  EXPECT_FALSE(parse_duration("5sec"));
  EXPECT_FALSE(parse_duration("5 seconds"));
  EXPECT_EQ(parse_duration("5s"), std::chrono::seconds(5));
  EXPECT_EQ(parse_duration("2min"), std::chrono::minutes(2));
  ScopedEnv e("TPCOMM_TIMEOUT", "5sec");
  try {
    get_duration("TPCOMM_TIMEOUT");
    FAIL() << "5sec was accepted";
  } catch (const ConfigError& err) {
    EXPECT_EQ(std::string(err.what()),
              "TPCOMM_TIMEOUT='5sec' is malformed: TPCOMM_TIMEOUT takes a duration (e.g. 300, "
              "30s, 250ms, 5m) (default '300s'). Fix or unset it.");
  }
  EXPECT_THROW(validate(), ConfigError);
}

// An NCCL_* variable set by habit: one line naming the TPCOMM_* variable that does its job.
TEST(Config, NcclVariableNamesItsCounterpart) {
  ScopedEnv a("NCCL_SOCKET_IFNAME", "eth0");
  ScopedEnv b("NCCL_DEBUG", "INFO");
  ScopedEnv c("TPCOMM_DEBUG", "warn");
  ScopedEnv d("NCCL_SOMETHING_ELSE", "1");  // no counterpart: nothing said
  std::vector<std::string> w = validate();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0],
            "NCCL_DEBUG is set, but tpcomm does not read NCCL_* variables: its counterpart is "
            "TPCOMM_DEBUG (set to 'warn')");
  EXPECT_EQ(w[1],
            "NCCL_SOCKET_IFNAME is set, but tpcomm does not read NCCL_* variables: its "
            "counterpart is TPCOMM_SOCKET_IFNAME (unset)");
}

TEST(Config, TraceLevelNeedsTraceCompiledIn) {
  ScopedEnv e("TPCOMM_DEBUG", "TRACE");
#ifdef TPCOMM_ENABLE_TRACE
  EXPECT_NO_THROW(validate());
#else
  try {
    validate();
    FAIL() << "TPCOMM_DEBUG=trace was accepted without trace compiled in";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what())
                  .find("TPCOMM_DEBUG='TRACE': trace lines are not compiled "
                        "into this build (configure with "
                        "-DTPCOMM_ENABLE_TRACE=ON)"),
              std::string::npos)
        << err.what();
  }
#endif
}

// A variable naming a file tpcomm reads: an unreadable file is an error, not ignored.
TEST(Config, UnreadableNamedFileIsAnError) {
  ScopedEnv e("TPCOMM_TOPO_FILE", "/nonexistent/topo.xml");
  try {
    validate();
    FAIL() << "an unreadable TPCOMM_TOPO_FILE was accepted";
  } catch (const ConfigError& err) {
    EXPECT_EQ(std::string(err.what()),
              "TPCOMM_TOPO_FILE='/nonexistent/topo.xml' cannot be read: No such file or "
              "directory. Fix or unset it.");
  }
  ScopedEnv s("TPCOMM_TOPO_FILE", "/proc/self/status");  // readable: validate has no say on its
  EXPECT_NO_THROW(validate());                           // content (the loader has)
}

TEST(Config, EveryParamHasDescriptionAndValidDefault) {
  for (const Param* p : all()) {
    EXPECT_FALSE(p->description.empty()) << p->name;
    if (!p->default_value.empty() && !p->external) {
      ScopedEnv e(std::string(p->name).c_str(), std::string(p->default_value).c_str());
      EXPECT_NO_THROW(validate()) << p->name << " default '" << p->default_value << "'";
    }
  }
}

TEST(Config, UnregisteredReadIsAnInternalError) {
  EXPECT_THROW(raw("TPCOMM_NOT_A_THING"), ConfigError);
}

TEST(Config, EditDistance) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
}

}  // namespace
}  // namespace tpcomm::config
