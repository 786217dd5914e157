// reduce by direct reads: as all_reduce's first step (each rank reduces one slice of each
// chunk straight from the peers' staging), then only the root reads the slices. Small
// messages: the root reduces every rank's flag+payload slot.
#include <cstring>

#include "collectives/shm/algos.h"

namespace tpcomm::coll::shm {

namespace {
constexpr const char* kOp = "reduce";
}  // namespace

void reduce_shm(Team& t, const void* in_v, void* out_v, size_t count, int root,
                const Reducer& red) {
  const int n = t.size(), me = t.rank();
  const size_t es = red.esize();
  const bool is_root = me == root;
  if (count * es <= kSmallBytes) {
    const int p = t.acquire_small(kOp);
    red.load(t.small_payload(me, p), in_v, count);
    const uint64_t v = t.post_small(p);
    if (!is_root) return;
    t.wait_small_all(p, v, kOp);
    red.merge(out_v, t.small_payload(0, p), t.small_payload(1, p), count);
    for (int r = 2; r < n; ++r) red.merge(out_v, out_v, t.small_payload(r, p), count);
    red.finish(out_v, count, n);
    return;
  }
  const bool premul = red.op() == ReduceOp::PREMUL_SUM;
  const bool stream = stream_results(count * es);
  const auto* in = static_cast<const uint8_t*>(in_v);
  auto* out = static_cast<uint8_t*>(out_v);
  const size_t chunk = std::max<size_t>(1, t.chunk_for(count * es) / es);
  for (size_t off = 0; off < count; off += chunk) {
    const size_t c = std::min(chunk, count - off);
    const Block mine = block_of(c, n, me);
    const int h = t.acquire_buf(kOp);
    uint8_t* st = t.staging(me, h);
    const uint8_t* src = in + off * es;
    if (premul) {
      red.load(st, src, c);
    } else {
      std::memcpy(st, src, mine.offset * es);
      const size_t after = mine.offset + mine.count;
      std::memcpy(st + after * es, src + after * es, (c - after) * es);
    }
    const uint64_t va = t.post();
    t.wait_all(va, kOp);
    uint8_t* acc = st + mine.offset * es;
    const void* first = premul ? static_cast<const void*>(acc) : src + mine.offset * es;
    for (int i = 1; i < n; ++i) {
      const int r = (me + i) % n;
      red.merge(acc, i == 1 ? first : acc, t.staging(r, h) + mine.offset * es, mine.count);
    }
    red.finish(acc, mine.count, n);
    const uint64_t vb = t.post();
    t.release_buf(h);
    if (!is_root) continue;
    copy_out(out + (off + mine.offset) * es, acc, mine.count * es, stream);
    for (int i = 1; i < n; ++i) {
      const int r = (me + i) % n;
      t.wait_peer(r, vb, kOp);
      const Block b = block_of(c, n, r);
      copy_out(out + (off + b.offset) * es, t.staging(r, h) + b.offset * es, b.count * es, stream);
    }
  }
}

}  // namespace tpcomm::coll::shm
