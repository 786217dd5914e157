// Internal to src/collectives/shm: the shared segments of the direct-read collectives. A
// segment is an anonymous memfd: it never has a name (nothing in /dev/shm, nothing left by a
// rank killed with SIGKILL); peers open it through /proc/<pid>/fd/<fd> of its owner (or
// pidfd_getfd), which only works between processes of one host and one user, and the kernel
// frees it with the last mapping.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace tpcomm::coll::shm {

/// A mapped segment; unmapped (and its descriptor closed) on destruction.
class MappedSegment {
 public:
  MappedSegment() = default;
  ~MappedSegment();
  MappedSegment(MappedSegment&& o) noexcept;
  MappedSegment& operator=(MappedSegment&& o) noexcept;
  MappedSegment(const MappedSegment&) = delete;
  MappedSegment& operator=(const MappedSegment&) = delete;

  /// Creates and maps a zero-filled memfd of `bytes`, pages reserved (no SIGBUS later).
  /// Throws TransportError saying why (e.g. out of memory).
  static MappedSegment create(size_t bytes, const std::string& what);
  /// Maps the segment that process `pid` holds as descriptor `fd`. Throws TransportError
  /// when it cannot be opened (other host or user, ptrace restrictions) or is not `bytes`.
  static MappedSegment open_peer(pid_t pid, int fd, size_t bytes, const std::string& what);

  uint8_t* base() const { return base_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  /// Drops the descriptor once every peer has mapped the segment.
  void close_fd();

 private:
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

/// The boot id of this machine (identifies the host for the checks of create()).
std::string boot_id();

}  // namespace tpcomm::coll::shm
