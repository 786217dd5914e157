// all_reduce by direct reads. Three regimes by size:
// - small (a small slot): every rank writes its input next to its flag, and reduces all the
//   slots in rank order (one step, identical bits on every rank); up to 16 bytes per rank the
//   slots of all ranks share a line (team.h, SharedSlot);
// - medium (one staging buffer): the same through the staging buffers;
// - large: chunks pipelined through three rotating staging buffers; per chunk each rank
//   copies in the parts its peers reduce, reduces its own slice straight from every peer's
//   staging into its own staging, and (one step later) reads every peer's slice into its
//   output: one post per chunk, each byte copied in once and out once. Two ranks, a SUM of
//   float32/float64/int32/int64 and streamed results (the 256 MiB case): the three steps of
//   one chunk period (copy in chunk k + 1, reduce chunk k, read the peer's slice of chunk
//   k - 1) run in one vector loop (fused_avx512/fused_avx2), so the core reads its input and
//   writes its output at once instead of in four 1 MiB passes one after the other.
#include <immintrin.h>

#include <cstring>

#include "collectives/shm/algos.h"
#include "collectives/shm/tiny.h"
#include "core/reduce.h"

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

// PREFETCHW as inline assembly (clang's <immintrin.h> lacks _m_prefetchw; CI builds both).
inline void prefetch_write(const uint8_t* p) { asm volatile("prefetchw %0" : : "m"(*p)); }

enum class AddKind : uint8_t { None, F32, F64, I32, I64 };

// The dtypes whose SUM the fused loop computes itself (one addition per element: the bits of
// the kernels' merge, and integers wrap as they do there).
AddKind add_kind(const Reducer& red) {
  if (red.op() != ReduceOp::SUM) return AddKind::None;
  switch (red.dtype()) {
    case DType::Float32:
      return AddKind::F32;
    case DType::Float64:
      return AddKind::F64;
    case DType::Int32:
      return AddKind::I32;
    case DType::Int64:
      return AddKind::I64;
    default:
      return AddKind::None;
  }
}

template <AddKind K>
__attribute__((target("avx512f"))) inline __m512i add512(__m512i a, __m512i b) {
  if constexpr (K == AddKind::F32) {
    return _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(b)));
  } else if constexpr (K == AddKind::F64) {
    return _mm512_castpd_si512(_mm512_add_pd(_mm512_castsi512_pd(a), _mm512_castsi512_pd(b)));
  } else if constexpr (K == AddKind::I32) {
    return _mm512_add_epi32(a, b);
  } else {
    return _mm512_add_epi64(a, b);
  }
}

template <AddKind K>
__attribute__((target("avx2"))) inline __m256i add256(__m256i a, __m256i b) {
  if constexpr (K == AddKind::F32) {
    return _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b)));
  } else if constexpr (K == AddKind::F64) {
    return _mm256_castpd_si256(_mm256_add_pd(_mm256_castsi256_pd(a), _mm256_castsi256_pd(b)));
  } else if constexpr (K == AddKind::I32) {
    return _mm256_add_epi32(a, b);
  } else {
    return _mm256_add_epi64(a, b);
  }
}

// One chunk period of the 2-rank all_reduce, as streams of equal length:
// copy in (`ci_src` -> `ci_dst`, for the peer), reduce (`a` + `b` -> `acc`, for the peer,
// and -> `rout`, streaming), gather (`g_src` -> `g_out`, streaming). The two streams for the
// peer are cached or streaming as the Team's StagePolicy for all_reduce chooses.
struct Period {
  const uint8_t* ci_src;
  uint8_t* ci_dst;
  size_t ci_bytes;
  const uint8_t* a;
  const uint8_t* b;
  uint8_t* acc;
  uint8_t* rout;
  size_t red_bytes;
  const uint8_t* g_src;
  uint8_t* g_out;
  size_t g_bytes;
};

// A staging store of 64 bytes: cached, or streaming with kNt (then `q` is aligned).
template <bool kNt>
__attribute__((target("avx512f"))) inline void stage512(uint8_t* q, __m512i v) {
  if constexpr (kNt) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(q), v);
  } else {
    _mm512_storeu_si512(q, v);
  }
}

// The loop on 64-byte vectors, two per stream per round; `rout` and `g_out` aligned, n a
// multiple of 128. The cached destinations are prefetched for writing 2 KiB ahead (the peer
// read those lines a period ago: taken back one store at a time they stall the loop). With
// kNt the two staging streams (`ci_dst`, `acc`, then aligned too) take streaming stores
// instead (StagePolicy).
template <AddKind K, bool kIn, bool kGather, bool kNt>
__attribute__((target("avx512f,prfchw"))) void fused_avx512(const Period& p, size_t n) {
  for (size_t i = 0; i < n; i += 128) {
    if (!kNt && i + 2048 < n) {
      prefetch_write(p.acc + i + 2048);
      prefetch_write(p.acc + i + 2048 + 64);
      if constexpr (kIn) {
        prefetch_write(p.ci_dst + i + 2048);
        prefetch_write(p.ci_dst + i + 2048 + 64);
      }
    }
    if constexpr (kIn) {
      const __m512i x = _mm512_loadu_si512(p.ci_src + i), y = _mm512_loadu_si512(p.ci_src + i + 64);
      stage512<kNt>(p.ci_dst + i, x);
      stage512<kNt>(p.ci_dst + i + 64, y);
    }
    const __m512i s0 = add512<K>(_mm512_loadu_si512(p.a + i), _mm512_loadu_si512(p.b + i));
    const __m512i s1 =
        add512<K>(_mm512_loadu_si512(p.a + i + 64), _mm512_loadu_si512(p.b + i + 64));
    stage512<kNt>(p.acc + i, s0);
    stage512<kNt>(p.acc + i + 64, s1);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p.rout + i), s0);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p.rout + i + 64), s1);
    if constexpr (kGather) {
      const __m512i g0 = _mm512_loadu_si512(p.g_src + i), g1 = _mm512_loadu_si512(p.g_src + i + 64);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(p.g_out + i), g0);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(p.g_out + i + 64), g1);
    }
  }
}

__attribute__((target("avx2"))) inline __m256i ld(const uint8_t* q) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
}
__attribute__((target("avx2"))) inline void st(uint8_t* q, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), v);
}
__attribute__((target("avx2"))) inline void nt(uint8_t* q, __m256i v) {
  _mm256_stream_si256(reinterpret_cast<__m256i*>(q), v);
}

// A staging store: cached, or streaming with kNt.
template <bool kNt>
__attribute__((target("avx2"))) inline void stage(uint8_t* q, __m256i v) {
  if constexpr (kNt) {
    nt(q, v);
  } else {
    st(q, v);
  }
}

// The same on 32-byte vectors; n a multiple of 64.
template <AddKind K, bool kIn, bool kGather, bool kNt>
__attribute__((target("avx2,prfchw"))) void fused_avx2(const Period& p, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    if (!kNt && i + 2048 < n) {
      prefetch_write(p.acc + i + 2048);
      if constexpr (kIn) prefetch_write(p.ci_dst + i + 2048);
    }
    if constexpr (kIn) {
      const __m256i x = ld(p.ci_src + i), y = ld(p.ci_src + i + 32);
      stage<kNt>(p.ci_dst + i, x);
      stage<kNt>(p.ci_dst + i + 32, y);
    }
    const __m256i s0 = add256<K>(ld(p.a + i), ld(p.b + i));
    const __m256i s1 = add256<K>(ld(p.a + i + 32), ld(p.b + i + 32));
    stage<kNt>(p.acc + i, s0);
    stage<kNt>(p.acc + i + 32, s1);
    nt(p.rout + i, s0);
    nt(p.rout + i + 32, s1);
    if constexpr (kGather) {
      const __m256i g0 = ld(p.g_src + i), g1 = ld(p.g_src + i + 32);
      nt(p.g_out + i, g0);
      nt(p.g_out + i + 32, g1);
    }
  }
}

template <AddKind K, bool kIn, bool kGather>
void fused_body(bool avx512, bool nt_stage, const Period& p, size_t n) {
  if (avx512) {
    nt_stage ? fused_avx512<K, kIn, kGather, true>(p, n)
             : fused_avx512<K, kIn, kGather, false>(p, n);
  } else {
    nt_stage ? fused_avx2<K, kIn, kGather, true>(p, n) : fused_avx2<K, kIn, kGather, false>(p, n);
  }
}

template <AddKind K>
void fused_dispatch(bool avx512, bool nt_stage, bool in, bool gather, const Period& p, size_t n) {
  if (in && gather) {
    fused_body<K, true, true>(avx512, nt_stage, p, n);
  } else if (in) {
    fused_body<K, true, false>(avx512, nt_stage, p, n);
  } else if (gather) {
    fused_body<K, false, true>(avx512, nt_stage, p, n);
  } else {
    fused_body<K, false, false>(avx512, nt_stage, p, n);
  }
}

// Runs one period: the common length of its streams in the vector loop, the rest (the head
// that aligns the streamed output, the tails, a misaligned gather) with the kernels and
// copies of the unfused path. The loop's staging stores stream when `nt_stage` and both
// staging streams are aligned there; returns whether they did.
bool run_period(Period p, AddKind kind, const Reducer& red, bool nt_stage) {
  const size_t es = red.esize();
  const bool avx512 = kernels::active_isa() >= kernels::ReduceIsa::Avx512;
  const size_t vec = avx512 ? 64 : 32;
  const size_t head = (vec - (reinterpret_cast<uintptr_t>(p.rout) & (vec - 1))) & (vec - 1);
  const bool gather =
      p.g_bytes > 0 &&
      ((reinterpret_cast<uintptr_t>(p.g_out) - reinterpret_cast<uintptr_t>(p.rout)) & (vec - 1)) ==
          0;
  size_t common = p.red_bytes;
  if (p.ci_bytes > 0) common = std::min(common, p.ci_bytes);
  if (gather) common = std::min(common, p.g_bytes);
  size_t done = 0;
  bool streamed = false;
  if (head % es == 0 && common >= head + 4096) {
    red.merge(p.acc, p.a, p.b, head / es);
    std::memcpy(p.rout, p.acc, head);
    if (p.ci_bytes > 0) std::memcpy(p.ci_dst, p.ci_src, head);
    if (gather) std::memcpy(p.g_out, p.g_src, head);
    const size_t body = (common - head) / (2 * vec) * (2 * vec);
    Period q = p;  // the absent streams' pointers stay null (no offset on a null pointer)
    if (p.ci_bytes > 0) {
      q.ci_src += head;
      q.ci_dst += head;
    }
    q.a += head;
    q.b += head;
    q.acc += head;
    q.rout += head;
    if (gather) {
      q.g_src += head;
      q.g_out += head;
    }
    auto aligned = [&](const uint8_t* x) {
      return (reinterpret_cast<uintptr_t>(x) & (vec - 1)) == 0;
    };
    streamed = nt_stage && aligned(q.acc) && (p.ci_bytes == 0 || aligned(q.ci_dst));
    const bool in = p.ci_bytes > 0;
    switch (kind) {
      case AddKind::F32:
        fused_dispatch<AddKind::F32>(avx512, streamed, in, gather, q, body);
        break;
      case AddKind::F64:
        fused_dispatch<AddKind::F64>(avx512, streamed, in, gather, q, body);
        break;
      case AddKind::I32:
        fused_dispatch<AddKind::I32>(avx512, streamed, in, gather, q, body);
        break;
      case AddKind::I64:
        fused_dispatch<AddKind::I64>(avx512, streamed, in, gather, q, body);
        break;
      case AddKind::None:
        break;
    }
    done = head + body;
  }
  // What the loop left: each stream on its own.
  const size_t rest = p.red_bytes - done;
  red.merge(p.acc + done, p.a + done, p.b + done, rest / es);
  copy_out(p.rout + done, p.acc + done, rest, true);
  if (p.ci_bytes > 0) std::memcpy(p.ci_dst + done, p.ci_src + done, p.ci_bytes - done);
  const size_t g_done = gather ? done : 0;
  if (p.g_bytes > 0) copy_out(p.g_out + g_done, p.g_src + g_done, p.g_bytes - g_done, true);
  return streamed;
}

// Two ranks, streamed results, a SUM the fused loop computes. Period k copies in this rank's
// input for the peer's slice of chunk k + 1, reduces this rank's slice of chunk k (its input +
// the peer's copy) into its staging and its output, and reads the peer's reduced slice of
// chunk k - 1 into its output; then one post. After the wait for the peer's post of period
// k - 1, the peer's copy-in of chunk k and its slice of chunk k - 1 are complete, and the
// buffer of chunk k - 2 is free (the peer read it last in period k - 1): three buffers rotate
// without waiting.
void chunked2(Team& t, const uint8_t* in, uint8_t* out, size_t count, const Reducer& red,
              AddKind kind, size_t chunk) {
  const int me = t.rank(), peer = 1 - me;
  const size_t es = red.esize();
  const size_t chunks = (count + chunk - 1) / chunk;
  auto len = [&](size_t k) { return std::min(chunk, count - k * chunk); };
  int cur = t.acquire_buf(kOp);
  {
    const Block pb = block_of(len(0), 2, peer);
    std::memcpy(t.staging(me, cur) + pb.offset * es, in + pb.offset * es, pb.count * es);
  }
  uint64_t v = t.post();
  t.wait_all(v, kOp);
  int prev = -1;
  for (size_t k = 0; k < chunks; ++k) {
    Period p{};
    int nb = -1;  // the buffer of chunk k + 1's copy-in; none in the last period
    if (k + 1 < chunks) {
      nb = t.acquire_buf(kOp);
      const Block pb = block_of(len(k + 1), 2, peer);
      p.ci_src = in + ((k + 1) * chunk + pb.offset) * es;
      p.ci_dst = t.staging(me, nb) + pb.offset * es;
      p.ci_bytes = pb.count * es;
    }
    const Block mine = block_of(len(k), 2, me);
    p.a = in + (k * chunk + mine.offset) * es;
    p.b = t.staging(peer, cur) + mine.offset * es;
    p.acc = t.staging(me, cur) + mine.offset * es;
    p.rout = out + (k * chunk + mine.offset) * es;
    p.red_bytes = mine.count * es;
    if (prev >= 0) {
      const Block gb = block_of(len(k - 1), 2, peer);
      p.g_src = t.staging(peer, prev) + gb.offset * es;
      p.g_out = out + ((k - 1) * chunk + gb.offset) * es;
      p.g_bytes = gb.count * es;
    }
    // The staging stores as the policy says; it learns from the periods with all three
    // streams of a whole chunk.
    const bool measured = prev >= 0 && nb >= 0 && len(k) == chunk && len(k + 1) == chunk;
    t.stage_policy(Team::StageUse::AllReduce)
        .write(p.red_bytes + p.ci_bytes, measured,
               [&](bool nt) { return run_period(p, kind, red, nt); });
    v = t.post();
    t.release_buf(cur);
    t.wait_all(v, kOp);
    if (nb < 0) break;
    prev = cur;
    cur = nb;
  }
  const Block gb = block_of(len(chunks - 1), 2, peer);
  copy_out(out + ((chunks - 1) * chunk + gb.offset) * es, t.staging(peer, cur) + gb.offset * es,
           gb.count * es, true);
}

// Whether chunked2 runs this call: 2 ranks, a SUM it computes, streamed results, and AVX2 at
// least (TPCOMM_REDUCE_ISA=scalar keeps the kernels' path).
bool fused_applies(Team& t, const Reducer& red, bool stream) {
  if (t.size() != 2 || !stream || add_kind(red) == AddKind::None) return false;
  return kernels::active_isa() >= kernels::ReduceIsa::Avx2;
}

void chunked(Team& t, const void* in_v, void* out_v, size_t count, const Reducer& red) {
  const int n = t.size(), me = t.rank();
  const size_t es = red.esize();
  const bool premul = red.op() == ReduceOp::PREMUL_SUM;
  const bool stream = stream_results(count * es);
  const auto* in = static_cast<const uint8_t*>(in_v);
  auto* out = static_cast<uint8_t*>(out_v);
  const size_t chunk = std::max<size_t>(1, t.chunk_for(count * es) / es);
  if (fused_applies(t, red, stream)) {
    chunked2(t, in, out, count, red, add_kind(red), chunk);
    return;
  }
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
  const size_t es = tiny_sum_elem_size(dtype);
  if (op != ReduceOp::SUM || es == 0) return false;
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
