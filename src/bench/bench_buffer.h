// tpbench's message buffers: zero-filled anonymous memory, optionally on transparent huge
// pages (--thp 1), as a framework's allocator gives large tensors when it asks for them
// (e.g. PyTorch's CPU allocator with THP_MEM_ALLOC_ENABLE=1). Huge pages change what
// single-copy (cross-memory) transfers cost: the kernel pins and maps 512 times fewer pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace tpcomm::bench {

class BenchBuffer {
 public:
  /// `bytes` (at least 1) of zeroed memory; with `thp`, 2 MiB aligned and advised
  /// MADV_HUGEPAGE (the kernel may still use small pages: THP disabled, or no huge page free).
  BenchBuffer(size_t bytes, bool thp);
  /// A shared view of the first `bytes` (at least 1) of the memory file `fd`, which must be
  /// that long. Several views of one file are distinct address ranges over the same physical
  /// pages (p2p_bench --alias-recv: W receive buffers with the cache footprint of one).
  BenchBuffer(size_t bytes, int fd);
  /// `count` such views of one new zero-filled memory file of `bytes`; the file lives as long
  /// as its views. Throws Error naming the step that failed.
  static std::vector<std::unique_ptr<BenchBuffer>> views_of_one(size_t bytes, int count);
  ~BenchBuffer();
  BenchBuffer(const BenchBuffer&) = delete;
  BenchBuffer& operator=(const BenchBuffer&) = delete;

  uint8_t* data() const { return data_; }

 private:
  uint8_t* map_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t map_len_ = 0;
};

}  // namespace tpcomm::bench
