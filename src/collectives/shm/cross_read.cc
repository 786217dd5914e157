// process_vm_readv with the ptrace rules spelled out.
#include "collectives/shm/cross_read.h"

#include <sys/prctl.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>

#include "core/log.h"

namespace tpcomm::coll::shm {

namespace {

int yama_scope() {
  std::ifstream f("/proc/sys/kernel/yama/ptrace_scope");
  int v = -1;
  if (!(f >> v)) return -1;
  return v;
}

}  // namespace

void allow_cross_reads() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (yama_scope() != 1) return;
    if (::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0) {
      TPLOG(INFO, COLL) << "shm_direct: Yama ptrace_scope is 1; allowed same-uid peers to read "
                           "this process's tensors (PR_SET_PTRACER_ANY) for single-copy reads";
    } else {
      TPLOG(INFO, COLL) << "shm_direct: prctl(PR_SET_PTRACER_ANY) failed: " << std::strerror(errno);
    }
  });
}

std::string probe_cross_read(pid_t pid, uint64_t addr, uint64_t expect) {
  uint64_t got = 0;
  iovec local{&got, sizeof got};
  iovec remote{reinterpret_cast<void*>(addr), sizeof got};
  const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
  if (n == static_cast<ssize_t>(sizeof got)) {
    if (got == expect) return "";
    return "process_vm_readv of pid " + std::to_string(pid) +
           " read an unexpected value (another process of that pid: different pid namespaces?)";
  }
  const int err = n < 0 ? errno : EFAULT;
  std::string why =
      "process_vm_readv of pid " + std::to_string(pid) + " failed: " + std::strerror(err);
  if (err == EPERM) {
    const int scope = yama_scope();
    why +=
        " (cross-memory reads need ptrace permission: the same uid, no seccomp filter "
        "refusing process_vm_readv";
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

int cross_read(pid_t pid, void* dst, uint64_t src, size_t len, size_t piece) {
  auto* d = static_cast<uint8_t*>(dst);
  if (piece == 0) piece = len;
  while (len > 0) {
    const size_t want = std::min(len, piece);
    iovec local{d, want};
    iovec remote{reinterpret_cast<void*>(src), want};
    const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
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

}  // namespace tpcomm::coll::shm
