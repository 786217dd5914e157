// One collective inside a running call (coll_run.h): the intra-host fast path when the
// group has one and it takes the call, else the CollComm algorithms (src/collectives/).
// Each returns the name of the algorithm that ran.
#pragma once

#include <cstdint>
#include <vector>

#include "collectives/args.h"
#include "pg/coll_run.h"

namespace tpcomm::detail {

const char* run_broadcast(CollContext& c, const coll::BroadcastArgs& a);
const char* run_all_reduce(CollContext& c, const coll::AllReduceArgs& a);
const char* run_reduce(CollContext& c, const coll::ReduceArgs& a);
const char* run_all_gather(CollContext& c, const coll::AllGatherArgs& a);
const char* run_reduce_scatter(CollContext& c, const coll::ReduceScatterArgs& a);
const char* run_barrier(CollContext& c, const coll::BarrierArgs& a);

/// all_to_all with per-peer byte counts: every rank learns what each peer sends it and all
/// agree whether any count disagrees, so that mismatched split sizes fail on every rank with
/// MismatchError before data moves (the group stays usable).
void agree_all_to_all_sizes(CollContext& c, const char* op, const std::vector<int64_t>& send_bytes,
                            const std::vector<int64_t>& recv_bytes);

}  // namespace tpcomm::detail
