// broadcast by direct reads: the root copies each chunk into its staging (alternating
// halves, so that it fills the next chunk while the readers copy the last one) and the
// readers copy it out. A small message travels in the root's flag+payload slot.
#include <cstring>

#include "collectives/shm/algos.h"

namespace tpcomm::coll::shm {

namespace {
constexpr const char* kOp = "broadcast";
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
  const size_t chunk = t.chunk_for(bytes);
  for (size_t off = 0; off < bytes; off += chunk) {
    const size_t c = std::min(chunk, bytes - off);
    const int h = t.acquire_buf(kOp);
    if (is_root) std::memcpy(t.staging(root, h), src + off, c);
    const uint64_t v = t.post();
    t.release_buf(h);
    if (!is_root) {
      t.wait_peer(root, v, kOp);
      copy_out(data + off, t.staging(root, h), c, stream);
    } else if (root_copies) {
      copy_out(data + off, t.staging(root, h), c, stream);  // from the cache, not the input
    }
  }
}

}  // namespace tpcomm::coll::shm
