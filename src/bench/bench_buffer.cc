#include "bench/bench_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "tpcomm/error.hpp"

namespace tpcomm::bench {

namespace {
constexpr size_t kHuge = size_t{2} << 20;
}  // namespace

BenchBuffer::BenchBuffer(size_t bytes, bool thp) {
  bytes = std::max<size_t>(bytes, 1);
  map_len_ = bytes + (thp ? kHuge : 0);
  void* p = mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw Error("tpbench: cannot allocate a " + std::to_string(bytes) +
                "-byte buffer: mmap: " + std::strerror(errno));
  }
  map_ = static_cast<uint8_t*>(p);
  data_ = map_;
  if (thp) {
    data_ = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(map_) + kHuge - 1) &
                                       ~uintptr_t{kHuge - 1});
    madvise(data_, bytes, MADV_HUGEPAGE);  // advice only: small pages when refused
  }
}

BenchBuffer::BenchBuffer(size_t bytes, int fd) {
  map_len_ = std::max<size_t>(bytes, 1);
  void* p = mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    throw Error("tpbench: cannot map a " + std::to_string(map_len_) +
                "-byte view of a memory file: mmap: " + std::strerror(errno));
  }
  map_ = data_ = static_cast<uint8_t*>(p);
}

std::vector<std::unique_ptr<BenchBuffer>> BenchBuffer::views_of_one(size_t bytes, int count) {
  bytes = std::max<size_t>(bytes, 1);
  int fd = memfd_create("tpcomm_bench_views", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    throw Error("tpbench: cannot make a " + std::to_string(bytes) + "-byte memory file: " + why);
  }
  std::vector<std::unique_ptr<BenchBuffer>> views;
  try {
    for (int i = 0; i < count; ++i) views.push_back(std::make_unique<BenchBuffer>(bytes, fd));
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);  // the mappings keep the file
  return views;
}

BenchBuffer::~BenchBuffer() {
  if (map_) munmap(map_, map_len_);
}

}  // namespace tpcomm::bench
