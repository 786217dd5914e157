// Cross-memory attach (process_vm_writev/readv): the single-copy put of the shm transport and
// the single-copy reads of the intra-host collectives (shm_direct). The kernel allows it toward
// a process we may ptrace: same uid (or CAP_SYS_PTRACE), no seccomp filter refusing it, and
// under Yama ptrace_scope 1 only if the target allowed us (PR_SET_PTRACER). Users probe it
// toward each peer by reading a known word, and fall back to copying through shared memory,
// saying why, when it is refused.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace tpcomm::xmem {

/// /proc/sys/kernel/yama/ptrace_scope, or -1 without Yama.
int ptrace_scope();

/// Under Yama scope 1, lets any process of this uid attach (PR_SET_PTRACER_ANY), so that
/// peers that are not our ancestors may read and write our buffers (as Open MPI's vader
/// does). Once per process; logged.
void allow_cross_memory_access();

/// Reads the 8-byte word at `addr` in `pid` and compares it with `cookie`. Returns "" when
/// cross-memory access works, else the reason (naming errno and the ptrace rules).
std::string probe_cross_memory(pid_t pid, uint64_t addr, uint64_t cookie);

/// Writes `len` bytes from `src` to `dst` in process `pid`, resuming after partial writes.
/// Returns 0 or the errno.
int cross_memory_write(pid_t pid, const void* src, uint64_t dst, size_t len);

/// Reads `len` bytes at `src` in process `pid` into `dst`, in calls of at most `piece` bytes
/// (0: one call), resuming after partial reads. Returns 0 or the errno.
int cross_memory_read(pid_t pid, void* dst, uint64_t src, size_t len, size_t piece = 0);

}  // namespace tpcomm::xmem
