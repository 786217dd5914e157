// userfaultfd memory monitor: see mem_monitor.h.
#include "transports/ibverbs/mem_monitor.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "core/log.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

namespace tpcomm::ibv::memmon {
namespace {

struct Monitor {
  pid_t pid = 0;
  int fd = -1;
  std::string why;
  std::atomic<bool> reading{false};
  std::mutex mu;  // subscribers' queues
  std::map<int, std::vector<std::pair<uintptr_t, uintptr_t>>> queues;
  int next_id = 1;

  void report(uintptr_t a, uintptr_t b) {
    std::lock_guard<std::mutex> lk(mu);
    for (auto& [id, q] : queues) q.push_back({a, b});
  }
  void unregister(uintptr_t a, uintptr_t b) {
    uffdio_range r{a, b - a};
    ioctl(fd, UFFDIO_UNREGISTER, &r);  // also wakes threads faulting in the range
    ioctl(fd, UFFDIO_WAKE, &r);
  }
  // Reads every pending event; runs with `reading` set, so subscribers wait for it.
  void drain() {
    uffd_msg m[16];
    for (;;) {
      ssize_t n = read(fd, m, sizeof(m));
      if (n <= 0) return;
      for (ssize_t i = 0; i < n / static_cast<ssize_t>(sizeof(uffd_msg)); ++i) {
        const uffd_msg& e = m[i];
        long page = sysconf(_SC_PAGESIZE);
        switch (e.event) {
          case UFFD_EVENT_UNMAP:
            report(e.arg.remove.start, e.arg.remove.end);
            break;
          case UFFD_EVENT_REMOVE:  // MADV_DONTNEED/FREE/REMOVE: the pages go, the range stays
            report(e.arg.remove.start, e.arg.remove.end);
            unregister(e.arg.remove.start, e.arg.remove.end);
            break;
          case UFFD_EVENT_REMAP:  // the mapping moved (or grew): stop watching it there too
            report(e.arg.remap.from, e.arg.remap.from + e.arg.remap.len);
            unregister(e.arg.remap.to, e.arg.remap.to + e.arg.remap.len);
            break;
          case UFFD_EVENT_PAGEFAULT: {  // a page went missing some other way: stop watching it
            uintptr_t a = e.arg.pagefault.address & ~static_cast<uintptr_t>(page - 1);
            report(a, a + static_cast<uintptr_t>(page));
            unregister(a, a + static_cast<uintptr_t>(page));
            break;
          }
          default:
            break;
        }
      }
    }
  }
  void loop() {
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, -1) < 0 && errno != EINTR) return;
      reading.store(true);
      drain();
      reading.store(false);
    }
  }
};

Monitor* start() {
  auto* m = new Monitor();
  m->pid = getpid();
  int fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd < 0 && (errno == EPERM || errno == EACCES))  // unprivileged: user-mode faults only
    fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
  if (fd < 0) {
    m->why = std::string("userfaultfd: ") + std::strerror(errno) +
             (errno == EPERM ? " (set /proc/sys/vm/unprivileged_userfaultfd to 1, or kernel "
                               "5.11+ for user-mode-only descriptors)"
                             : "");
    return m;
  }
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;
  if (ioctl(fd, UFFDIO_API, &api) != 0) {
    m->why = std::string("userfaultfd lacks unmap/remove/remap events: ") + std::strerror(errno);
    close(fd);
    return m;
  }
  m->fd = fd;
  std::thread([m] { m->loop(); }).detach();
  return m;
}

// One monitor per process; a forked child starts its own (the parent's thread is not there
// and the child's mappings are not registered with the inherited descriptor).
Monitor& monitor() {
  static std::mutex mu;
  static Monitor* m = nullptr;
  std::lock_guard<std::mutex> lk(mu);
  if (m == nullptr || m->pid != getpid()) m = start();
  return *m;
}

}  // namespace

bool available(std::string* why) {
  Monitor& m = monitor();
  if (why) *why = m.why;
  return m.fd >= 0;
}

bool watch(uintptr_t start, uintptr_t end) {
  Monitor& m = monitor();
  if (m.fd < 0 || end <= start) return false;
  // Missing pages of a watched range would fault into the monitor: populate them first (a
  // registration pins them anyway). Fails for read-only and some file mappings.
  if (madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_WRITE) != 0) return false;
  uffdio_register r{};
  r.range.start = start;
  r.range.len = end - start;
  r.mode = UFFDIO_REGISTER_MODE_MISSING;
  return ioctl(m.fd, UFFDIO_REGISTER, &r) == 0;
}

int subscribe() {
  Monitor& m = monitor();
  std::lock_guard<std::mutex> lk(m.mu);
  int id = m.next_id++;
  m.queues[id];
  return id;
}

void unsubscribe(int id) {
  Monitor& m = monitor();
  std::lock_guard<std::mutex> lk(m.mu);
  m.queues.erase(id);
}

std::vector<std::pair<uintptr_t, uintptr_t>> take(int id) {
  Monitor& m = monitor();
  // A munmap returns once its event was read; the reader queues it before clearing `reading`.
  while (m.reading.load()) std::this_thread::yield();
  std::vector<std::pair<uintptr_t, uintptr_t>> out;
  std::lock_guard<std::mutex> lk(m.mu);
  auto it = m.queues.find(id);
  if (it != m.queues.end()) out.swap(it->second);
  return out;
}

}  // namespace tpcomm::ibv::memmon
