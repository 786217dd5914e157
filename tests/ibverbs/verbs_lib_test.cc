// Loading libibverbs at run time: a missing library, a library without the
// verbs entry points, or a host without an RDMA device each give a one-line reason naming the
// library (the transport is then unavailable), and the registry knows the variables.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/config.h"
#include "tpcomm/error.hpp"
#include "transports/ibverbs/probe.h"

namespace tpcomm::testing {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The reason the ports of `lib` are unusable, or "" when some port is usable.
std::string unusable_reason(const std::string& lib, const std::string& hca = "") {
  ibv::Options o;
  o.library = lib;
  o.hca = hca;
  try {
    ibv::usable_ports(ibv::load_verbs(lib), o);
  } catch (const NotSupportedError& e) {
    return e.what();
  }
  return "";
}

TEST(IbverbsLib, VariablesAreRegistered) {
  for (const char* v : {"TPCOMM_IBVERBS_LIB", "TPCOMM_IB_GID_INDEX", "TPCOMM_IB_TIMEOUT",
                        "TPCOMM_IB_RETRY_CNT", "TPCOMM_IB_QPS_PER_CONNECTION"})
    EXPECT_NE(config::find(v), nullptr) << v;
  setenv("TPCOMM_IB_TIMEOUT", "40", 1);
  config::reload();
  EXPECT_THROW(ibv::Options::from_env(), ConfigError);
  unsetenv("TPCOMM_IB_TIMEOUT");
  setenv("TPCOMM_IB_RETRY_CNT", "3", 1);
  config::reload();
  EXPECT_EQ(ibv::Options::from_env().retry_cnt, 3);
  unsetenv("TPCOMM_IB_RETRY_CNT");
  config::reload();
  EXPECT_EQ(ibv::Options::from_env().library, "libibverbs.so.1");
}

TEST(IbverbsLib, MissingLibraryIsUnavailableNamingIt) {
  std::string why = unusable_reason("libtpcomm_no_such_verbs.so.1");
  EXPECT_TRUE(contains(why, "cannot load 'libtpcomm_no_such_verbs.so.1'")) << why;
  EXPECT_TRUE(contains(why, "TPCOMM_IBVERBS_LIB")) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
}

TEST(IbverbsLib, LibraryWithoutVerbsIsRefused) {
  std::string why = unusable_reason("libm.so.6");
  EXPECT_TRUE(contains(why, "'libm.so.6' lacks ibv_get_device_list")) << why;
}

TEST(IbverbsLib, RealLibraryWithoutDeviceSaysSo) {
  std::string why = unusable_reason("libibverbs.so.1");
  if (contains(why, "cannot load"))
    GTEST_SKIP() << "libibverbs.so.1 is not installed here: " << why;
  if (!contains(why, "no RDMA device"))
    GTEST_SKIP() << "this host has an RDMA device (" << (why.empty() ? "usable" : why) << ")";
  EXPECT_TRUE(contains(why, "'libibverbs.so.1'")) << why;
}

TEST(IbverbsLib, MalformedHcaFilterIsAConfigError) {
  ibv::Options o;
  o.library = "libibverbs.so.1";
  o.hca = "mlx5_0:x";
  try {
    ibv::usable_ports(ibv::load_verbs(o.library), o);
    ADD_FAILURE() << "accepted TPCOMM_IB_HCA=" << o.hca;
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "TPCOMM_IB_HCA")) << e.what();
  } catch (const NotSupportedError& e) {
    GTEST_SKIP() << "libibverbs.so.1 cannot be loaded here: " << e.what();
  }
}

}  // namespace
}  // namespace tpcomm::testing
