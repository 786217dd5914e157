// all_reduce by direct reads. Three regimes by size:
// - small (a small slot): every rank writes its input next to its flag, and reduces all the
//   slots in rank order (one step, identical bits on every rank); up to 16 bytes per rank the
//   slots of all ranks share a line (team.h, SharedSlot);
// - medium (one staging buffer): the same through the staging buffers;
// - large: chunks pipelined through three rotating staging buffers; per chunk each rank
//   copies in the parts its peers reduce, reduces its own slice straight from every peer's
//   staging into its own staging, and (one step later) reads every peer's slice into its
//   output: one post per chunk, each byte copied in once and out once.
#include <cstring>

#include "collectives/shm/algos.h"

namespace tpcomm::coll::shm {

namespace {

constexpr const char* kOp = "all_reduce";
// Up to this size one rank reducing the whole vector beats two steps.
constexpr size_t kDirectMax = 64 * 1024;

// Sums a few elements of every rank's slot in rank order, as the kernels would (one
// rounding per addition in the element type; integers wrap): a kernel call costs more than
// the arithmetic of a latency-bound message.
template <class T, class Acc = T, class Payload>
void tiny_sum(Team& t, Payload payload, void* out, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    T x;
    std::memcpy(&x, payload(0) + i * sizeof(T), sizeof(T));
    Acc acc = static_cast<Acc>(x);
    for (int r = 1; r < t.size(); ++r) {
      std::memcpy(&x, payload(r) + i * sizeof(T), sizeof(T));
      acc = static_cast<Acc>(acc + static_cast<Acc>(x));
    }
    x = static_cast<T>(acc);
    std::memcpy(static_cast<uint8_t*>(out) + i * sizeof(T), &x, sizeof(T));
  }
}

// `payload(r)`: rank r's contribution.
template <class Payload>
bool tiny(Team& t, Payload payload, void* out, size_t count, DType dtype, ReduceOp op) {
  if (count > 8 || (op != ReduceOp::SUM && op != ReduceOp::AVG)) return false;
  switch (dtype) {
    case DType::Float32:
      tiny_sum<float>(t, payload, out, count);
      return true;
    case DType::Float64:
      tiny_sum<double>(t, payload, out, count);
      return true;
    case DType::Int32:
      tiny_sum<int32_t, uint32_t>(t, payload, out, count);
      return true;
    case DType::Int64:
      tiny_sum<int64_t, uint64_t>(t, payload, out, count);
      return true;
    default:
      return false;
  }
}

// Reduces every rank's contribution (`payload(r)`) in rank order into `out`.
template <class Payload>
void reduce_all(Team& t, Payload payload, void* out, size_t count, const Reducer& red) {
  const int n = t.size();
  if (!tiny(t, payload, out, count, red.dtype(), red.op())) {
    red.merge(out, payload(0), payload(1), count);
    for (int r = 2; r < n; ++r) red.merge(out, out, payload(r), count);
  }
  red.finish(out, count, n);
}

// A copy of at most kSharedBytes: the common sizes as fixed-size moves (no library call).
void copy_tiny(uint8_t* dst, const void* src, size_t bytes) {
  if (bytes == 8) {
    std::memcpy(dst, src, 8);
  } else if (bytes == 4) {
    std::memcpy(dst, src, 4);
  } else if (bytes == 16) {
    std::memcpy(dst, src, 16);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

void small(Team& t, const void* in, void* out, size_t count, const Reducer& red) {
  if (t.fits_shared(count * red.esize())) {
    // The tiniest: every rank's slot in one shared line.
    const int p = t.acquire_shared(kOp);
    red.load(t.shared_payload(t.rank(), p), in, count);
    const uint64_t v = t.post_shared(p);
    t.wait_shared_all(p, v, kOp);
    reduce_all(
        t, [&](int r) { return t.shared_payload(r, p); }, out, count, red);
    return;
  }
  const int p = t.acquire_small(kOp);
  red.load(t.small_payload(t.rank(), p), in, count);
  const uint64_t v = t.post_small(p);
  t.wait_small_all(p, v, kOp);
  reduce_all(
      t, [&](int r) { return t.small_payload(r, p); }, out, count, red);
}

void direct(Team& t, const void* in, void* out, size_t count, const Reducer& red) {
  const int n = t.size();
  const int h = t.acquire_buf(kOp);
  red.load(t.staging(t.rank(), h), in, count);
  const uint64_t v = t.post();
  t.release_buf(h);
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
  const size_t chunk = std::max<size_t>(1, t.chunk_for(count * es) / es);
  const size_t chunks = (count + chunk - 1) / chunk;
  auto len = [&](size_t k) { return std::min(chunk, count - k * chunk); };
  // Copies in the parts of chunk k the peers reduce (PREMUL_SUM: everything, scaled).
  auto copy_in = [&](size_t k, int b) {
    const size_t c = len(k);
    const Block mine = block_of(c, n, me);
    uint8_t* st = t.staging(me, b);
    const uint8_t* src = in + k * chunk * es;
    if (premul) {
      red.load(st, src, c);
      return;
    }
    std::memcpy(st, src, mine.offset * es);
    const size_t after = mine.offset + mine.count;
    std::memcpy(st + after * es, src + after * es, (c - after) * es);
  };
  // Reads the peers' reduced slices of chunk k into the output.
  auto gather = [&](size_t k, int b) {
    const size_t c = len(k);
    for (int i = 1; i < n; ++i) {
      const int r = (me + i) % n;
      const Block blk = block_of(c, n, r);
      copy_out(out + (k * chunk + blk.offset) * es, t.staging(r, b) + blk.offset * es,
               blk.count * es, stream);
    }
  };
  // One post per chunk: it says "chunk k copied in, and my slice of chunk k-1 reduced".
  int cur = t.acquire_buf(kOp), prev = -1;
  copy_in(0, cur);
  for (size_t k = 0; k < chunks; ++k) {
    const uint64_t v = t.post();
    if (prev >= 0) t.release_buf(prev);  // peers gather it before their next post
    t.wait_all(v, kOp);
    if (prev >= 0) gather(k - 1, prev);
    // Reduce this rank's slice of chunk k from every peer's staging into its own.
    const size_t c = len(k);
    const Block mine = block_of(c, n, me);
    uint8_t* acc = t.staging(me, cur) + mine.offset * es;
    const void* first =
        premul ? static_cast<const void*>(acc) : in + (k * chunk + mine.offset) * es;
    for (int i = 1; i < n; ++i) {
      const int r = (me + i) % n;
      red.merge(acc, i == 1 ? first : acc, t.staging(r, cur) + mine.offset * es, mine.count);
    }
    red.finish(acc, mine.count, n);
    copy_out(out + (k * chunk + mine.offset) * es, acc, mine.count * es, stream);
    prev = cur;
    if (k + 1 < chunks) {
      cur = t.acquire_buf(kOp);
      copy_in(k + 1, cur);
    }
  }
  const uint64_t v = t.post();
  t.release_buf(prev);
  t.wait_all(v, kOp);
  gather(chunks - 1, prev);
}

}  // namespace

bool allreduce_shm_tiny(Team& t, const void* in, void* out, size_t count, DType dtype,
                        ReduceOp op) {
  // What small() and reduce_all() do for these, without the Reducer's calls: the same steps
  // and the same arithmetic (identical bits).
  if (op != ReduceOp::SUM) return false;
  size_t es;
  switch (dtype) {
    case DType::Float32:
    case DType::Int32:
      es = 4;
      break;
    case DType::Float64:
    case DType::Int64:
      es = 8;
      break;
    default:
      return false;
  }
  if (!t.fits_shared(count * es)) return false;
  const int p = t.acquire_shared(kOp);
  copy_tiny(t.shared_payload(t.rank(), p), in, count * es);
  const uint64_t v = t.post_shared(p);
  t.wait_shared_all(p, v, kOp);
  return tiny(
      t, [&](int r) { return t.shared_payload(r, p); }, out, count, dtype, op);
}

void allreduce_shm(Team& t, const void* in, void* out, size_t count, const Reducer& red) {
  const size_t bytes = count * red.esize();
  if (bytes <= kSmallBytes) {
    small(t, in, out, count, red);
  } else if (bytes <= kDirectMax && bytes <= t.buf_bytes()) {
    direct(t, in, out, count, red);
  } else {
    chunked(t, in, out, count, red);
  }
}

}  // namespace tpcomm::coll::shm
