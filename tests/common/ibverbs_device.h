// The generic transport tests and the ibverbs test device (tests/ibverbs_device/fake_verbs.h):
// where the ibverbs transport cannot start on this machine (no libibverbs, no RDMA device) and
// the loopback device was built, TPCOMM_IBVERBS_LIB is pointed at it, so that every test
// parameterised over the transports also runs over ibverbs in CI.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "core/config.h"
#include "tpcomm/error.hpp"
#include "tpcomm/store.hpp"
#include "tpcomm/transport/transport.hpp"

namespace tpcomm::testing {

/// True when transport `name` can be created here (one probe instance, destroyed at once).
inline bool transport_starts(const std::string& name) {
  transport::TransportContext ctx;
  ctx.rank = 0;
  ctx.world_size = 1;
  ctx.job_id = "probe";
  ctx.host_id = "probe";
  ctx.store = std::make_shared<HashStore>();
  try {
    transport::create_transport(name, ctx);
    return true;
  } catch (const Error&) {
    return false;
  }
}

/// True when the ibverbs transport can run the tests here: on a real device, or on the test
/// device, which this selects (for this process and the ranks it forks) when needed.
inline bool ibverbs_for_tests() {
  static const bool ok = [] {
    if (!transport::has_transport("ibverbs")) return false;
    if (transport_starts("ibverbs")) return true;
    const char* dev = TPCOMM_TEST_BIN_DIR "/libtpcomm_fake_verbs.so";
    if (access(dev, R_OK) != 0) return false;
    setenv("TPCOMM_IBVERBS_LIB", dev, 1);
    config::reload();
    return transport_starts("ibverbs");
  }();
  return ok;
}

}  // namespace tpcomm::testing
