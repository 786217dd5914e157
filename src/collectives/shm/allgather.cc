// all_gather by direct reads: each rank copies its block (chunk by chunk) into its staging;
// every rank then copies every block from its owner's staging into its output.
#include <cstring>

#include "collectives/shm/algos.h"

namespace tpcomm::coll::shm {

namespace {
constexpr const char* kOp = "all_gather";
}  // namespace

void allgather_shm(Team& t, const void* in_v, void* out_v, size_t m) {
  const int n = t.size(), me = t.rank();
  const auto* in = static_cast<const uint8_t*>(in_v);
  auto* out = static_cast<uint8_t*>(out_v);
  const bool in_place = in == out + me * m;
  const bool stream = stream_results(m * static_cast<size_t>(n));
  if (m <= kSmallBytes) {
    const int p = t.acquire_small(kOp);
    std::memcpy(t.small_payload(me, p), in, m);
    const uint64_t v = t.post_small(p);
    if (!in_place) std::memcpy(out + me * m, in, m);
    for (int i = 1; i < n; ++i) {
      const int r = (me + i) % n;
      t.wait_small(r, p, v, kOp);
      std::memcpy(out + r * m, t.small_payload(r, p), m);
    }
    return;
  }
  const size_t chunk = t.chunk_for(m);
  for (size_t off = 0; off < m; off += chunk) {
    const size_t c = std::min(chunk, m - off);
    const int h = t.acquire_buf(kOp);
    std::memcpy(t.staging(me, h), in + off, c);
    const uint64_t v = t.post();
    t.release_buf(h);
    // Our own block from the staging copy (in cache), not from the input again.
    if (!in_place) copy_out(out + me * m + off, t.staging(me, h), c, stream);
    for (int i = 1; i < n; ++i) {
      const int r = (me + i) % n;
      t.wait_peer(r, v, kOp);
      copy_out(out + r * m + off, t.staging(r, h), c, stream);
    }
  }
}

}  // namespace tpcomm::coll::shm
