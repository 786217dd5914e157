// all_reduce by direct reads. Three regimes by size:
// - small (a small slot): every rank writes its input next to its flag, and reduces all the
//   slots in rank order (one step, identical bits on every rank);
// - medium (one staging half): the same through the staging buffers;
// - large: chunks pipelined through the two staging halves; per chunk each rank copies in
//   the parts its peers reduce, reduces its own slice straight from every peer's staging into
//   its own staging, then every rank reads every slice into its output (two steps per chunk,
//   each byte copied in once and out once).
#include <cstring>

#include "collectives/shm/algos.h"

namespace tpcomm::coll::shm {

namespace {

constexpr const char* kOp = "all_reduce";
// Up to this size one rank reducing the whole vector beats two steps.
constexpr size_t kDirectMax = 64 * 1024;

void small(Team& t, const void* in, void* out, size_t count, const Reducer& red) {
  const int n = t.size();
  const int p = t.acquire_small(kOp);
  red.load(t.small_payload(t.rank(), p), in, count);
  const uint64_t v = t.post_small(p);
  t.wait_small_all(p, v, kOp);
  red.merge(out, t.small_payload(0, p), t.small_payload(1, p), count);
  for (int r = 2; r < n; ++r) red.merge(out, out, t.small_payload(r, p), count);
  red.finish(out, count, n);
}

void direct(Team& t, const void* in, void* out, size_t count, const Reducer& red) {
  const int n = t.size();
  const int h = t.acquire_half(kOp);
  red.load(t.staging(t.rank(), h), in, count);
  const uint64_t v = t.post();
  t.release_half(h);
  t.wait_all(v, kOp);
  red.merge(out, t.staging(0, h), t.staging(1, h), count);
  for (int r = 2; r < n; ++r) red.merge(out, out, t.staging(r, h), count);
  red.finish(out, count, n);
}

void chunked(Team& t, const void* in_v, void* out_v, size_t count, const Reducer& red) {
  const int n = t.size(), me = t.rank();
  const size_t es = red.esize();
  const bool premul = red.op() == ReduceOp::PREMUL_SUM;
  const bool stream = stream_results(count * es);
  const auto* in = static_cast<const uint8_t*>(in_v);
  auto* out = static_cast<uint8_t*>(out_v);
  const size_t chunk = std::max<size_t>(1, t.chunk_bytes() / es);
  for (size_t off = 0; off < count; off += chunk) {
    const size_t c = std::min(chunk, count - off);
    const Block mine = block_of(c, n, me);
    const int h = t.acquire_half(kOp);
    uint8_t* st = t.staging(me, h);
    const uint8_t* src = in + off * es;
    // Copy in what the peers reduce (PREMUL_SUM: everything, scaled).
    if (premul) {
      red.load(st, src, c);
    } else {
      std::memcpy(st, src, mine.offset * es);
      const size_t after = mine.offset + mine.count;
      std::memcpy(st + after * es, src + after * es, (c - after) * es);
    }
    const uint64_t va = t.post();
    t.wait_all(va, kOp);
    // Reduce this rank's slice from every peer's staging into its own staging.
    uint8_t* acc = st + mine.offset * es;
    const void* first = premul ? static_cast<const void*>(acc) : src + mine.offset * es;
    for (int i = 1; i < n; ++i) {
      const int r = (me + i) % n;
      red.merge(acc, i == 1 ? first : acc, t.staging(r, h) + mine.offset * es, mine.count);
    }
    red.finish(acc, mine.count, n);
    const uint64_t vb = t.post();
    t.release_half(h);
    copy_out(out + (off + mine.offset) * es, acc, mine.count * es, stream);
    t.wait_all(vb, kOp);
    for (int i = 1; i < n; ++i) {
      const int r = (me + i) % n;
      const Block b = block_of(c, n, r);
      copy_out(out + (off + b.offset) * es, t.staging(r, h) + b.offset * es, b.count * es, stream);
    }
  }
}

}  // namespace

void allreduce_shm(Team& t, const void* in, void* out, size_t count, const Reducer& red) {
  const size_t bytes = count * red.esize();
  if (bytes <= kSmallBytes) {
    small(t, in, out, count, red);
  } else if (bytes <= kDirectMax && bytes <= t.half_bytes()) {
    direct(t, in, out, count, red);
  } else {
    chunked(t, in, out, count, red);
  }
}

}  // namespace tpcomm::coll::shm
