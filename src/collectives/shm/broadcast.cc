// broadcast by direct reads, in one of three modes the root chooses in the first step (its
// step descriptor tells the readers; only the root knows whether it is in place):
//  - staged: the root copies each chunk into its staging (three buffers in turn, so that it
//    fills the next chunk while the readers copy the last one; large tensors with the stores
//    Team's StagePolicy for broadcast chooses) and the readers copy it out;
//  - direct (TPCOMM_SHM_COLL_CMA=on, or auto up to Team::kAutoDirectMax): the root publishes
//    its input's address and each reader copies the whole tensor from it with
//    process_vm_readv (single copy) while the root makes its own copy (out of place);
//  - split (auto, root out of place): rounds of one staged chunk followed by a piece the
//    readers read directly (kSplitNum/kSplitDen of a chunk) while the root copies that piece
//    to its own output, so that the root's two copies per staged byte and the readers' slower
//    cross-memory reads balance.
// In the direct and split modes the root returns once every reader has posted that it is
// done with the input. A small message travels in the root's flag+payload slot.
#include <cstring>

#include "collectives/shm/algos.h"
#include "core/cross_memory.h"
#include "tpcomm/error.hpp"

namespace tpcomm::coll::shm {

namespace {

constexpr const char* kOp = "broadcast";

enum Mode : uint64_t { kStaged = 0, kDirect = 1, kSplit = 2 };

// Bytes read directly per round of the split mode, for a staged chunk of `chunk` bytes. Per
// byte, a process_vm_readv costs the reader about 2.2x a copy out of the root's cache, and the
// root's copy in and out of staging about 2.4x its direct copy (CPU time of each, on the
// development VM): readers take 0.4 of the bytes directly, i.e. 2/3 of a chunk per chunk.
constexpr size_t kSplitNum = 2, kSplitDen = 3;
size_t split_piece(size_t chunk) {
  return std::max<size_t>(64, chunk * kSplitNum / kSplitDen / 64 * 64);
}

[[noreturn]] void read_failed(const Team& t, int root, size_t bytes, int err) {
  throw TransportError("shm_direct broadcast: rank " + std::to_string(t.rank()) +
                       " could not read " + std::to_string(bytes) + " bytes from root " +
                       std::to_string(root) + " (pid " + std::to_string(t.pid(root)) +
                       ") with process_vm_readv: " + std::strerror(err) +
                       "; TPCOMM_SHM_COLL_CMA=off keeps to staging copies");
}

}  // namespace

void broadcast_shm(Team& t, void* data_v, const void* src_v, size_t bytes, int root) {
  const bool is_root = t.rank() == root;
  auto* data = static_cast<uint8_t*>(data_v);
  const auto* src = static_cast<const uint8_t*>(src_v);
  const bool stream = stream_results(bytes);
  const bool root_copies = is_root && src != data;  // out of place on the root
  if (bytes <= kSmallBytes) {
    if (root_copies) std::memcpy(data, src, bytes);
    const int p = t.acquire_small(kOp);
    if (is_root) std::memcpy(t.small_payload(root, p), src, bytes);
    const uint64_t v = t.post_small(p);
    if (!is_root) {
      t.wait_small(root, p, v, kOp);
      std::memcpy(data, t.small_payload(root, p), bytes);
    }
    return;
  }
  const bool cross = t.cross_reads(bytes);  // the same on every rank
  uint64_t mode = kStaged, addr = 0;
  int err = 0;
  const size_t chunk = t.chunk_for(bytes);
  for (size_t off = 0; off < bytes;) {
    const bool first = off == 0;
    const size_t c = std::min(chunk, bytes - off);
    const int h = t.acquire_buf(kOp);
    bool nt = false;  // the root wrote this chunk's staging with streaming stores
    if (is_root) {
      if (first && cross) {
        mode = t.cross_direct(bytes) ? kDirect : root_copies ? kSplit : kStaged;
        *t.desc(root, h) = StepDesc{reinterpret_cast<uint64_t>(src), mode};
      }
      if (mode != kDirect && stream) {
        // Large: cached or streaming stores, as the policy learns from whole chunks.
        nt = t.stage_policy(Team::StageUse::Broadcast).write(c, c == chunk, [&](bool s) {
          copy_out(t.staging(root, h), src + off, c, s);
        });
      } else if (mode != kDirect) {
        std::memcpy(t.staging(root, h), src + off, c);
      }
    }
    const uint64_t v = t.post();
    t.release_buf(h);
    if (!is_root) {
      t.wait_peer(root, v, kOp);
      if (first && cross) {
        mode = t.desc(root, h)->direct;
        addr = t.desc(root, h)->addr;
      }
    }
    if (mode == kDirect) {
      if (is_root) {
        if (root_copies) copy_out(data, src, bytes, stream);
      } else {
        err = xmem::cross_memory_read(static_cast<pid_t>(t.pid(root)), data, addr, bytes,
                                      kCrossPiece);
      }
      break;
    }
    if (is_root) {
      // From the cache; from the source when the staging went by streaming stores (reading
      // it back would fetch it from memory and pull it into this core's cache for the readers
      // to fetch from, the path streaming avoids).
      if (root_copies) copy_out(data + off, nt ? src + off : t.staging(root, h), c, stream);
    } else {
      copy_out(data + off, t.staging(root, h), c, stream);
    }
    off += c;
    if (mode == kSplit && off < bytes) {
      const size_t d = std::min(split_piece(chunk), bytes - off);
      if (is_root) {
        copy_out(data + off, src + off, d, stream);
      } else if (err == 0) {
        err = xmem::cross_memory_read(static_cast<pid_t>(t.pid(root)), data + off, addr + off, d,
                                      kCrossPiece);
      }
      off += d;
    }
  }
  if (mode != kStaged) {
    // Readers are done with the root's input; it returns once all say so. A reader that could
    // not read posts too (the phases stay in step) and then fails.
    const uint64_t done = t.post();
    if (is_root) t.wait_all(done, kOp);
    if (err != 0) read_failed(t, root, bytes, err);
  }
}

}  // namespace tpcomm::coll::shm
