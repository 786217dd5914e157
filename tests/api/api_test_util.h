// Shared by the tests of the rest of the API (objects, DeviceMesh, averaging): a world made
// with init_process_group over the harness's store, so the free functions find it.
#pragma once

#include <chrono>
#include <string>

#include "common/multiproc.h"
#include "tpcomm/tpcomm.hpp"

namespace tpcomm::testing {

/// init_process_group over the rank's store (backend auto), a short timeout so a bug fails
/// fast instead of hanging.
inline void init_world(RankContext& c, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  InitOptions o;
  o.store = c.store;
  o.rank = c.rank;
  o.world_size = c.world_size;
  o.timeout = timeout;
  init_process_group(o);
}

/// The bytes of a string, as an Object.
inline Object obj(const std::string& s) { return Object(s.begin(), s.end()); }

}  // namespace tpcomm::testing
