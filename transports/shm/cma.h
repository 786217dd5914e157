// Cross-memory attach (process_vm_writev/readv): the single-copy put of the shm transport.
// The kernel allows it toward a process we may ptrace: same uid (or CAP_SYS_PTRACE), and under
// Yama ptrace_scope 1 only if the target allowed us (PR_SET_PTRACER). Each transport tests it
// toward each peer at connection time by reading the peer's probe word, and falls back to
// copying through the ring, saying why, when it is refused.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace tpcomm::transport::shm {

/// /proc/sys/kernel/yama/ptrace_scope, or -1 without Yama.
int ptrace_scope();

/// Under Yama scope 1, lets any process of this uid attach (PR_SET_PTRACER_ANY), so that
/// peers that are not our ancestors may write into our registered memory (as Open MPI's vader
/// does). Once per process; logged.
void allow_cross_memory_access();

/// Reads the 8-byte word at `addr` in `pid` and compares it with `cookie`. Returns "" when
/// cross-memory access works, else the reason (naming errno and the ptrace rules).
std::string probe_cross_memory(pid_t pid, uint64_t addr, uint64_t cookie);

/// Writes `len` bytes from `src` to `dst` in process `pid`, resuming after partial writes.
/// Returns 0 or the errno.
int cross_memory_write(pid_t pid, const void* src, uint64_t dst, size_t len);

/// Reads `len` bytes at `src` in process `pid` into `dst`, resuming after partial reads.
/// Returns 0 or the errno.
int cross_memory_read(pid_t pid, void* dst, uint64_t src, size_t len);

}  // namespace tpcomm::transport::shm
