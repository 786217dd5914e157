// tpcomm: RDMA-first, topology-aware communication for tensorplay.distributed.
// Everything public is reachable from this header, except the launcher (tprun's code), which
// has its own: <tpcomm/launch.hpp>.
#pragma once

#include "tpcomm/averaging.hpp"
#include "tpcomm/collectives.hpp"
#include "tpcomm/device_mesh.hpp"
#include "tpcomm/error.hpp"
#include "tpcomm/objects.hpp"
#include "tpcomm/process_group.hpp"
#include "tpcomm/rendezvous.hpp"
#include "tpcomm/store.hpp"
#include "tpcomm/types.hpp"
#include "tpcomm/version.hpp"
