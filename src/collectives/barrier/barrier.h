// barrier algorithms.
#pragma once

#include <span>

#include "collectives/comm.h"
#include "collectives/types.h"

namespace tpcomm::coll {

std::span<const AlgoInfo> barrier_catalogue();

void barrier_dissemination(CollComm& comm);

}  // namespace tpcomm::coll
