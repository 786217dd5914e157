// Shared-memory segments of the shm transport. A segment is an unnamed file on the tmpfs of
// TPCOMM_SHM_DIR (O_TMPFILE; memfd where that is unsupported) whose descriptor travels to the
// peer over a unix socket (SCM_RIGHTS). Nothing ever has a name in /dev/shm, so a process
// killed with SIGKILL leaves nothing behind: the kernel frees the memory with the last
// mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tpcomm::transport::shm {

/// "256 KiB", "23.4 GiB": sizes in messages.
std::string format_bytes(uint64_t bytes);

/// Free bytes and total size of the file system holding `dir` (statvfs); {0, 0} when it
/// cannot be read.
struct FsSpace {
  uint64_t free = 0;
  uint64_t total = 0;
};
FsSpace fs_space(const std::string& dir);

/// A mapped shared-memory segment. Movable, not copyable; unmapped on destruction.
class Segment {
 public:
  Segment() = default;
  ~Segment();
  Segment(Segment&& o) noexcept;
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  /// Creates and maps a zero-filled segment of `bytes` in `dir`. Checks the free space of
  /// `dir` first and reserves the pages (fallocate), so that a /dev/shm too small fails
  /// here with a TransportError naming both sizes and `what` (e.g. "the ring to rank 3"),
  /// not later with SIGBUS. Only the first `reserved` bytes (all when `reserved` >= `bytes`)
  /// are reserved and mapped in now; the rest stays a hole until reserve() claims it.
  static Segment create(size_t bytes, const std::string& dir, const std::string& what,
                        size_t reserved = ~size_t{0});

  /// Maps a segment received from a peer; takes ownership of `fd` (closed after mapping).
  /// Throws PeerError when its size is not `bytes`. Only the first `populate` bytes are
  /// mapped in at once (the rest may still be a hole: touching it first would allocate it).
  static Segment attach(int fd, size_t bytes, const std::string& what,
                        size_t populate = ~size_t{0});

  /// Reserves the pages of [offset, offset + length) of a segment we created: by fallocate
  /// while we hold its descriptor, else by faulting them in through the mapping
  /// (MADV_POPULATE_WRITE). Returns "" or why not (a full /dev/shm, with both sizes).
  std::string reserve(size_t offset, size_t length, const std::string& dir,
                      const std::string& what);

  uint8_t* base() const { return base_; }
  size_t size() const { return size_; }
  /// The descriptor to pass to the peer (valid until close_fd()).
  int fd() const { return fd_; }
  /// Closes the descriptor once the peer has its own (the mapping stays).
  void close_fd();
  bool valid() const { return base_ != nullptr; }

 private:
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

}  // namespace tpcomm::transport::shm
