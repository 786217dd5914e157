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

int cross_memory_write(pid_t pid, const void* src, uint64_t dst, size_t len) {
  const auto* s = static_cast<const uint8_t*>(src);
  while (len > 0) {
    iovec local{const_cast<uint8_t*>(s), len};
    iovec remote{reinterpret_cast<void*>(dst), len};
    ssize_t n = ::process_vm_writev(pid, &local, 1, &remote, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EFAULT;
    s += n;
    dst += static_cast<uint64_t>(n);
    len -= static_cast<size_t>(n);
  }
  return 0;
}

int cross_memory_read(pid_t pid, void* dst, uint64_t src, size_t len, size_t piece) {
  auto* d = static_cast<uint8_t*>(dst);
  if (piece == 0) piece = len;
  while (len > 0) {
    const size_t want = std::min(len, piece);
    iovec local{d, want};
    iovec remote{reinterpret_cast<void*>(src), want};
    ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EFAULT;
    d += n;
    src += static_cast<uint64_t>(n);
    len -= static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace tpcomm::xmem
