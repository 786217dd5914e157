// tpcomm: RDMA-first, topology-aware communication for tensorplay.distributed.
// Everything public is reachable from this header.
#pragma once

#include "tpcomm/averaging.hpp"
#include "tpcomm/collectives.hpp"
#include "tpcomm/device_mesh.hpp"
#include "tpcomm/error.hpp"
#include "tpcomm/launch.hpp"
#include "tpcomm/objects.hpp"
#include "tpcomm/process_group.hpp"
#include "tpcomm/rendezvous.hpp"
#include "tpcomm/store.hpp"
#include "tpcomm/types.hpp"
#include "tpcomm/version.hpp"
