// More ranks on a host than it has cores: a waiter that spins holds the core a peer needs to
// answer, so the waits of the p2p engine and of the shm collectives spin only briefly there.
#pragma once

#include <cstdint>

#include "core/cpu_limit.h"  // container_cpus(): the CPUs to compare the host's ranks with

namespace tpcomm {

/// Microseconds a wait spins before it yields: `configured`, or at most 2 when the host's
/// ranks (`local_ranks`; 0 when unknown) outnumber its `cpus`, unless the user set the spin
/// (`user_set`).
inline int64_t wait_spin_us(int64_t configured, bool user_set, int64_t local_ranks, long cpus) {
  if (user_set || local_ranks <= 0 || cpus <= 0 || local_ranks <= cpus) return configured;
  return configured < 2 ? configured : 2;
}

}  // namespace tpcomm
