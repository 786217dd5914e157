// The availability queries are honest about this build and this machine.
#include <gtest/gtest.h>

#include "topology/probe.h"
#include "tpcomm/tpcomm.hpp"
#include "tpcomm/transport/transport.hpp"

namespace tpcomm {
namespace {

bool probed_usable(const std::string& name) {
  for (const topo::TransportProbe& p : topo::probe_transports())
    if (p.name == name) return p.built && p.usable;
  return false;
}

TEST(Availability, MatchesTheBuildAndTheMachine) {
  transport::register_builtin_transports();
  EXPECT_TRUE(is_available());
  EXPECT_TRUE(is_gloo_available());  // the name torch code uses for CPU tensors
  EXPECT_FALSE(is_mpi_available());
  EXPECT_EQ(is_ucx_available(), transport::has_transport("ucx") && probed_usable("ucx"));
  EXPECT_EQ(is_ibverbs_available(),
            transport::has_transport("ibverbs") && probed_usable("ibverbs"));
  EXPECT_EQ(is_nccl_available(), transport::has_transport("nccl"));
  EXPECT_EQ(std::string(Backend::GLOO), "gloo");
  EXPECT_FALSE(is_initialized());
  EXPECT_THROW(get_backend(), InvalidArgument);  // no default group yet
}

}  // namespace
}  // namespace tpcomm
