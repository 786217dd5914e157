// Shared-memory segments: unnamed tmpfs files, size-checked, passed by descriptor.
#include "transports/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/log.h"
#include "tpcomm/error.hpp"

namespace tpcomm::transport::shm {

std::string format_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  if (v == static_cast<double>(static_cast<uint64_t>(v))) {
    std::snprintf(buf, sizeof buf, "%.0f %s", v, kUnits[u]);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  }
  return buf;
}

FsSpace fs_space(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return {};
  return {static_cast<uint64_t>(st.f_bavail) * st.f_frsize,
          static_cast<uint64_t>(st.f_blocks) * st.f_frsize};
}

namespace {

std::string too_small(size_t bytes, const std::string& dir, const std::string& what) {
  FsSpace sp = fs_space(dir);
  return "shm: " + what + " needs " + format_bytes(bytes) + " of shared memory, but " + dir +
         " has only " + format_bytes(sp.free) + " free (of " + format_bytes(sp.total) +
         "); enlarge it (docker run --shm-size=..., or mount -o remount,size=... " + dir +
         ") or lower TPCOMM_SHM_RING_SIZE";
}

int open_unnamed(const std::string& dir, const std::string& what) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  int err = errno;
  if (err == ENOSPC) throw TransportError(too_small(0, dir, what));
  if (err == ENOENT && dir != "/dev/shm") {
    throw TransportError("shm: cannot create " + what + " in " + dir + ": " + std::strerror(err) +
                         " (check TPCOMM_SHM_DIR)");
  }
  // No O_TMPFILE on this file system (or no such directory): an anonymous memfd is just as
  // unnamed, though not accounted to the directory.
  fd = ::memfd_create("tpcomm-shm", MFD_CLOEXEC);
  if (fd < 0) {
    throw TransportError("shm: cannot create " + what + ": O_TMPFILE in " + dir + " failed (" +
                         std::strerror(err) + ") and memfd_create failed (" + std::strerror(errno) +
                         ")");
  }
  TPLOG(INFO, SHM) << "shm: O_TMPFILE in " << dir << " unavailable (" << std::strerror(err)
                   << "); using memfd_create";
  return fd;
}

}  // namespace

Segment::~Segment() {
  if (base_) ::munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
}

Segment::Segment(Segment&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      fd_(std::exchange(o.fd_, -1)) {}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    Segment tmp(std::move(*this));
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

namespace {

// Maps [0, bytes) of the file; the first `populate` bytes are faulted in at once.
void* map_shared(int fd, size_t bytes, size_t populate) {
  if (populate >= bytes) {
    return ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return p;
  // Read faults map the pages already allocated; a hole is never touched.
  const auto* b = static_cast<const volatile uint8_t*>(p);
  for (size_t off = 0; off < populate; off += 4096) (void)b[off];
  return p;
}

}  // namespace

Segment Segment::create(size_t bytes, const std::string& dir, const std::string& what,
                        size_t reserved) {
  reserved = std::min(reserved, bytes);
  FsSpace sp = fs_space(dir);
  if (sp.total > 0 && reserved > sp.free) throw TransportError(too_small(reserved, dir, what));
  Segment s;
  s.fd_ = open_unnamed(dir, what);
  s.size_ = bytes;
  if (::ftruncate(s.fd_, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    if (err == ENOSPC || err == EFBIG || err == ENOMEM) {
      throw TransportError(too_small(bytes, dir, what));
    }
    throw TransportError("shm: cannot size " + what + " to " + format_bytes(bytes) + ": " +
                         std::strerror(err));
  }
  // Reserve the pages now: tmpfs allocates lazily, and a full /dev/shm would otherwise
  // surface as SIGBUS on first touch.
  std::string why = s.reserve(0, reserved, dir, what);
  if (!why.empty()) throw TransportError(why);
  void* p = map_shared(s.fd_, bytes, reserved);
  if (p == MAP_FAILED) {
    throw TransportError("shm: cannot map " + format_bytes(bytes) + " for " + what + ": " +
                         std::strerror(errno));
  }
  s.base_ = static_cast<uint8_t*>(p);
  ::madvise(p, bytes, MADV_DONTFORK);  // a child the user forks must not keep rings alive
  return s;
}

std::string Segment::reserve(size_t offset, size_t length, const std::string& dir,
                             const std::string& what) {
  if (length == 0) return "";
  if (fd_ < 0) {
    // The descriptor went to the peer (a child this process forks must not keep the file
    // alive through it): fault the pages in through the mapping instead, which reports a full
    // file system as an error rather than SIGBUS.
    if (base_ == nullptr || offset > size_ || length > size_ - offset) {
      return "shm: cannot reserve " + format_bytes(length) + " for " + what +
             ": outside the segment";
    }
    if (::madvise(base_ + offset, length, MADV_POPULATE_WRITE) == 0) return "";
    const int err = errno;
    if (err == EFAULT || err == ENOMEM) return too_small(length, dir, what);
    return "shm: cannot reserve " + format_bytes(length) + " for " + what +
           ": madvise(MADV_POPULATE_WRITE): " + std::strerror(err) +
           (err == EINVAL ? " (a kernel older than 5.14)" : "");
  }
  int rc;
  do {
    rc = ::posix_fallocate(fd_, static_cast<off_t>(offset), static_cast<off_t>(length));
  } while (rc == EINTR);
  if (rc == ENOSPC || rc == ENOMEM) return too_small(length, dir, what);
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
    return "shm: cannot reserve " + format_bytes(length) + " for " + what + ": " +
           std::strerror(rc);
  }
  return "";
}

Segment Segment::attach(int fd, size_t bytes, const std::string& what, size_t populate) {
  Segment s;
  s.fd_ = fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw PeerError("shm: cannot inspect " + what + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != bytes) {
    throw PeerError("shm: " + what + " is " + format_bytes(static_cast<uint64_t>(st.st_size)) +
                    " but its handshake announced " + format_bytes(bytes));
  }
  void* p = map_shared(fd, bytes, populate);
  if (p == MAP_FAILED) {
    throw TransportError("shm: cannot map " + what + " (" + format_bytes(bytes) +
                         "): " + std::strerror(errno));
  }
  s.base_ = static_cast<uint8_t*>(p);
  s.size_ = bytes;
  ::madvise(p, bytes, MADV_DONTFORK);
  s.close_fd();
  return s;
}

void Segment::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace tpcomm::transport::shm
