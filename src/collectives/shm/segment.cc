// Anonymous shared segments opened by peers through /proc (or pidfd_getfd).
#include "collectives/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "tpcomm/error.hpp"

namespace tpcomm::coll::shm {

namespace {

uint8_t* map_fd(int fd, size_t bytes, const std::string& what) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    throw TransportError("shm_direct: cannot map " + what + " (" + std::to_string(bytes) +
                         " bytes): " + std::strerror(errno));
  }
  // A child the user forks must not keep the segments (nor see them change).
  ::madvise(p, bytes, MADV_DONTFORK);
  return static_cast<uint8_t*>(p);
}

}  // namespace

MappedSegment::~MappedSegment() {
  if (base_) ::munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
}

MappedSegment::MappedSegment(MappedSegment&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      fd_(std::exchange(o.fd_, -1)) {}

MappedSegment& MappedSegment::operator=(MappedSegment&& o) noexcept {
  if (this != &o) {
    MappedSegment tmp(std::move(*this));
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

MappedSegment MappedSegment::create(size_t bytes, const std::string& what) {
  MappedSegment s;
  s.fd_ = ::memfd_create("tpcomm-shm-coll", MFD_CLOEXEC);
  if (s.fd_ < 0) {
    throw TransportError("shm_direct: memfd_create for " + what +
                         " failed: " + std::strerror(errno));
  }
  if (::ftruncate(s.fd_, static_cast<off_t>(bytes)) != 0) {
    throw TransportError("shm_direct: cannot size " + what + " to " + std::to_string(bytes) +
                         " bytes: " + std::strerror(errno));
  }
  int rc;
  do {
    rc = ::posix_fallocate(s.fd_, 0, static_cast<off_t>(bytes));
  } while (rc == EINTR);
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
    throw TransportError("shm_direct: cannot reserve " + std::to_string(bytes) + " bytes for " +
                         what + ": " + std::strerror(rc) + " (lower TPCOMM_SHM_COLL_BYTES)");
  }
  s.size_ = bytes;
  s.base_ = map_fd(s.fd_, bytes, what);
  return s;
}

MappedSegment MappedSegment::open_peer(pid_t pid, int fd, size_t bytes, const std::string& what) {
  std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  int local = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  int proc_err = local < 0 ? errno : 0;
  if (local < 0) {
    // /proc may be hidden or mounted without access to other processes; pidfd_getfd needs
    // ptrace rights instead.
    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfd >= 0) {
      local = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0));
      ::close(pidfd);
    }
  }
  if (local < 0) {
    throw TransportError("shm_direct: cannot open " + what + " (" + path +
                         "): " + std::strerror(proc_err) +
                         ", and pidfd_getfd failed: " + std::strerror(errno) +
                         "; the ranks must run on one host as one user, with /proc visible");
  }
  MappedSegment s;
  s.fd_ = local;
  struct stat st {};
  if (::fstat(local, &st) != 0 || static_cast<uint64_t>(st.st_size) != bytes) {
    throw TransportError("shm_direct: " + what + " (" + path + ") is " +
                         std::to_string(st.st_size) + " bytes, expected " + std::to_string(bytes) +
                         "; is the peer on another host?");
  }
  s.size_ = bytes;
  s.base_ = map_fd(local, bytes, what);
  s.close_fd();
  return s;
}

void MappedSegment::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

}  // namespace tpcomm::coll::shm
