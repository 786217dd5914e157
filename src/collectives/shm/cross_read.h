// Internal to src/collectives/shm: single-copy reads of a peer's own buffers with
// process_vm_readv (cross-memory attach), for large broadcast and all_gather. The kernel
// allows it toward a process we may ptrace: the same uid (or CAP_SYS_PTRACE), under Yama
// ptrace_scope 1 only where the target allowed it (PR_SET_PTRACER), and not where a seccomp
// profile refuses the call (containers' default). HostColl::create probes it toward every
// peer and keeps the staging copies when any rank is refused.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace tpcomm::coll::shm {

/// Under Yama ptrace_scope 1, lets processes of this uid read this one's memory
/// (PR_SET_PTRACER_ANY), as the shm transport and Open MPI's vader do. Once per process.
void allow_cross_reads();

/// Reads the 8-byte word at `addr` of process `pid` and compares it with `expect`. Returns ""
/// when cross-memory reads work, else why not (errno and the ptrace rules).
std::string probe_cross_read(pid_t pid, uint64_t addr, uint64_t expect);

/// Copies `len` bytes at `src` in process `pid` to `dst`, in pieces of at most `piece` bytes
/// (resuming after partial reads). Returns 0 or the errno.
int cross_read(pid_t pid, void* dst, uint64_t src, size_t len, size_t piece);

}  // namespace tpcomm::coll::shm
