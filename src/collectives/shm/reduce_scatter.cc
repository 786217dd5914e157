// reduce_scatter by direct reads: per chunk, each rank copies in the parts of the blocks its
// peers own, then reduces its own block straight from every peer's staging into its output
// (one step per chunk).
#include <cstring>

#include "collectives/shm/algos.h"

namespace tpcomm::coll::shm {

namespace {
constexpr const char* kOp = "reduce_scatter";
}  // namespace

void reduce_scatter_shm(Team& t, const void* in_v, void* out_v, size_t m, const Reducer& red) {
  const int n = t.size(), me = t.rank();
  const size_t es = red.esize();
  const bool premul = red.op() == ReduceOp::PREMUL_SUM;
  const auto* in = static_cast<const uint8_t*>(in_v);
  auto* out = static_cast<uint8_t*>(out_v);
  const size_t un = static_cast<size_t>(n);
  // Staging holds n pieces of `chunk` elements, piece j from block j.
  const bool small = m * un * es <= kSmallBytes;
  const size_t chunk = small ? m : std::max<size_t>(1, t.chunk_for(m * un * es) / es / un);
  for (size_t off = 0; off < m; off += chunk) {
    const size_t c = std::min(chunk, m - off);
    int slot = -1, h = -1;
    if (small) {
      slot = t.acquire_small(kOp);
    } else {
      h = t.acquire_buf(kOp);
    }
    auto stage = [&](int r) { return small ? t.small_payload(r, slot) : t.staging(r, h); };
    uint8_t* st = stage(me);
    for (int j = 0; j < n; ++j) {
      if (j == me && !premul) continue;
      red.load(st + j * chunk * es, in + (j * m + off) * es, c);
    }
    const uint64_t v = small ? t.post_small(slot) : t.post();
    if (small) {
      t.wait_small_all(slot, v, kOp);
    } else {
      t.release_buf(h);
      t.wait_all(v, kOp);
    }
    uint8_t* dst = out + off * es;
    const size_t piece = me * chunk * es;
    const void* first = premul ? static_cast<const void*>(st + piece) : in + (me * m + off) * es;
    for (int i = 1; i < n; ++i) {
      const int r = (me + i) % n;
      red.merge(dst, i == 1 ? first : dst, stage(r) + piece, c);
    }
    red.finish(dst, c, n);
  }
}

}  // namespace tpcomm::coll::shm
