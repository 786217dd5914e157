// all_reduce algorithms. Each works in place on `data`, which holds this rank's contribution
// (already loaded: copied, or scaled for PREMUL_SUM) and on return holds the merge over all
// ranks, identical on every rank (AVG's division is left to the caller).
#pragma once

#include <cstddef>
#include <span>

#include "collectives/comm.h"
#include "collectives/types.h"
#include "collectives/util.h"

namespace tpcomm::coll {

std::span<const AlgoInfo> allreduce_catalogue();

void allreduce_ring(CollComm& comm, void* data, size_t count, const Reducer& red,
                    const ExecParams& params);
/// Ring out of place: reads this rank's contribution from `input` (not scaled: not for
/// PREMUL_SUM) and leaves the merge in `data`, without loading `data` first.
void allreduce_ring_from(CollComm& comm, const void* input, void* data, size_t count,
                         const Reducer& red, const ExecParams& params);
void allreduce_tree(CollComm& comm, void* data, size_t count, const Reducer& red,
                    const ExecParams& params);
void allreduce_recursive_doubling(CollComm& comm, void* data, size_t count, const Reducer& red,
                                  const ExecParams& params);
void allreduce_rabenseifner(CollComm& comm, void* data, size_t count, const Reducer& red,
                            const ExecParams& params);

}  // namespace tpcomm::coll
