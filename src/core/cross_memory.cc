// process_vm_readv/writev with the ptrace rules spelled out.
#include "core/cross_memory.h"

#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>

#include "core/log.h"

namespace tpcomm::xmem {

int ptrace_scope() {
  std::ifstream f("/proc/sys/kernel/yama/ptrace_scope");
  int v = -1;
  if (!(f >> v)) return -1;
  return v;
}

void allow_cross_memory_access() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (ptrace_scope() != 1) return;
    if (::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0) {
      TPLOG(INFO, SHM) << "Yama ptrace_scope is 1; allowed same-uid peers to read and write "
                          "this process's buffers (PR_SET_PTRACER_ANY) for single-copy copies";
    } else {
      TPLOG(INFO, SHM) << "prctl(PR_SET_PTRACER_ANY) failed: " << std::strerror(errno);
    }
  });
}

std::string probe_cross_memory(pid_t pid, uint64_t addr, uint64_t cookie) {
  uint64_t got = 0;
  iovec local{&got, sizeof got};
  iovec remote{reinterpret_cast<void*>(addr), sizeof got};
  ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
  if (n == static_cast<ssize_t>(sizeof got)) {
    if (got == cookie) return "";
    return "process_vm_readv of pid " + std::to_string(pid) +
           " read an unexpected value (another process of that pid: different pid namespaces?)";
  }
  int err = n < 0 ? errno : EFAULT;
  std::string why =
      "process_vm_readv of pid " + std::to_string(pid) + " failed: " + std::strerror(err);
  if (err == EPERM) {
    int scope = ptrace_scope();
    why +=
        " (cross-memory access needs ptrace permission: the same uid, no seccomp filter "
        "refusing process_vm_readv/writev";
    if (scope >= 0) why += ", and /proc/sys/kernel/yama/ptrace_scope is " + std::to_string(scope);
    if (scope == 1) why += ", which needs PR_SET_PTRACER in the peer";
    if (scope >= 2) why += ", which allows it only with CAP_SYS_PTRACE";
    why += ")";
  } else if (err == ENOSYS) {
    why += " (kernel built without CONFIG_CROSS_MEMORY_ATTACH)";
  } else if (err == ESRCH) {
    why += " (no such process here: different pid namespaces?)";
  }
  return why;
}

namespace {

// Runs `op` (process_vm_readv or process_vm_writev) over [local, +len) <-> [remote, +len) in
// calls of at most `piece` bytes, resuming after partial transfers and EINTR: 0 or an errno.
template <class Op>
int transfer(Op op, pid_t pid, uint8_t* local, uint64_t remote, size_t len, size_t piece) {
  if (piece == 0) piece = len;
  while (len > 0) {
    const size_t want = std::min(len, piece);
    iovec l{local, want};
    iovec r{reinterpret_cast<void*>(remote), want};
    ssize_t n = op(pid, &l, 1, &r, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EFAULT;
    local += n;
    remote += static_cast<uint64_t>(n);
    len -= static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

int cross_memory_write(pid_t pid, const void* src, uint64_t dst, size_t len) {
  // process_vm_writev only reads the local iovec.
  return transfer(::process_vm_writev, pid, static_cast<uint8_t*>(const_cast<void*>(src)), dst, len,
                  0);
}

int cross_memory_read(pid_t pid, void* dst, uint64_t src, size_t len, size_t piece) {
  return transfer(::process_vm_readv, pid, static_cast<uint8_t*>(dst), src, len, piece);
}

}  // namespace tpcomm::xmem
