// Which RDMA ports this process may use: the library loaded, its devices listed, filtered by
// TPCOMM_IB_HCA and by port state. The factory calls it; a failure is the one-line reason the
// transport is unavailable.
#pragma once

#include <vector>

#include "transports/ibverbs/options.h"
#include "transports/ibverbs/verbs_lib.h"

namespace tpcomm::ibv {

/// The usable (ACTIVE, allowed by TPCOMM_IB_HCA) ports, in device order. Throws
/// NotSupportedError saying why none is usable (no library, no device, all filtered, all
/// down), or ConfigError for a malformed TPCOMM_IB_HCA.
std::vector<PortInfo> usable_ports(const VerbsLib& lib, const Options& o);

}  // namespace tpcomm::ibv
