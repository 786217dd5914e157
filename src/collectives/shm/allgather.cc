// all_gather by direct reads. Chunked: each rank copies its block (chunk by chunk) into its
// staging; every rank then copies every block from its owner's staging into its output. The
// chunks are pipelined one step apart: while a rank copies its peers' chunk k out of their
// staging it copies its own chunk k + 1 in, in one loop (fused_step), so that the stream it
// reads from memory (its input) and the stream it writes (its output) run at once as in a plain
// copy, instead of one 2 MiB phase after the other; out of place, the same loop writes its own
// block from the registers it loaded for the staging copy (the input is read once). Large
// blocks go into the staging with cached or streaming stores as the Team's StagePolicy for
// all_gather learns from the timed steps.
// Single copy (TPCOMM_SHM_COLL_CMA=on, or auto up to a few MiB per block): each rank
// publishes its input's address, reads every peer's block straight from the peer's input with
// process_vm_readv, posts that it is done, and returns once every peer has posted the same
// (its input is no longer read).
#include <immintrin.h>

#include <cstring>

#include "collectives/shm/algos.h"
#include "core/cross_memory.h"
#include "core/reduce.h"
#include "tpcomm/error.hpp"

namespace tpcomm::coll::shm {

namespace {
constexpr const char* kOp = "all_gather";

// PREFETCHW, a hint (a no-op on CPUs without it), in inline assembly: the _m_prefetchw
// intrinsic is declared by gcc's <immintrin.h> but not by clang's, and CI builds both.
inline void prefetch_write(const uint8_t* p) { asm volatile("prefetchw %0" : : "m"(*p)); }

// 64-byte vectors where the reduction kernels run AVX-512 (TPCOMM_REDUCE_ISA limits both).
bool use_avx512() { return kernels::active_isa() >= kernels::ReduceIsa::Avx512; }

// The fused loop body on vectors: `in` -> `stage` (cached stores, or streaming with kNt: a
// peer reads them next, StagePolicy chooses), `in` -> `own` (streaming, when kOwn), `peer` ->
// `pout` (streaming). `pout` (and `own`) are
// aligned to the vector; n is a multiple of 2 vectors. The staging lines are prefetched for
// writing 2 KiB ahead: the peer read them two chunks ago, and taking them back one store at a
// time stalled the loop (+5% measured). Measured and dropped: four 4 KiB pages at a time,
// prefetching the peer's staging, demoting the staging lines with CLDEMOTE (-35%). Streaming
// stores into the staging (kNt) cost 25% where the cores share a cache (the peer then reads
// it from memory: measured on a Xeon VM) and win 2-3x where they do not (the far placement
// of a Zen 4 VM's two vCPUs), so StagePolicy chooses per chunk.
template <bool kOwn, bool kNt>
__attribute__((target("avx512f,prfchw"))) void fused_avx512(const uint8_t* in, uint8_t* stage,
                                                            uint8_t* own, const uint8_t* peer,
                                                            uint8_t* pout, size_t n) {
  for (size_t i = 0; i < n; i += 128) {
    if (!kNt && i + 2048 < n) {
      prefetch_write(stage + i + 2048);
      prefetch_write(stage + i + 2048 + 64);
    }
    const __m512i a = _mm512_loadu_si512(in + i), b = _mm512_loadu_si512(in + i + 64);
    const __m512i c = _mm512_loadu_si512(peer + i), d = _mm512_loadu_si512(peer + i + 64);
    if constexpr (kNt) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(stage + i), a);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(stage + i + 64), b);
    } else {
      _mm512_storeu_si512(stage + i, a);
      _mm512_storeu_si512(stage + i + 64, b);
    }
    if constexpr (kOwn) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(own + i), a);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(own + i + 64), b);
    }
    _mm512_stream_si512(reinterpret_cast<__m512i*>(pout + i), c);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(pout + i + 64), d);
  }
}

template <bool kOwn, bool kNt>
__attribute__((target("avx2,prfchw"))) void fused_avx2(const uint8_t* in, uint8_t* stage,
                                                       uint8_t* own, const uint8_t* peer,
                                                       uint8_t* pout, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    if (!kNt && i + 2048 < n) prefetch_write(stage + i + 2048);
    const auto* vi = reinterpret_cast<const __m256i*>(in + i);
    const auto* vp = reinterpret_cast<const __m256i*>(peer + i);
    const __m256i a = _mm256_loadu_si256(vi), b = _mm256_loadu_si256(vi + 1);
    const __m256i c = _mm256_loadu_si256(vp), d = _mm256_loadu_si256(vp + 1);
    if constexpr (kNt) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(stage + i), a);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(stage + i + 32), b);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(stage + i), a);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(stage + i + 32), b);
    }
    if constexpr (kOwn) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(own + i), a);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(own + i + 32), b);
    }
    _mm256_stream_si256(reinterpret_cast<__m256i*>(pout + i), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(pout + i + 32), d);
  }
}

// One pipelined step: copies `n_in` bytes of the input into this rank's staging (and, out of
// place, into its own block of the output: `own`, else null) while it copies `n_out` bytes of
// a peer's staging into the output, in one pass where both overlap. Streaming stores for the
// output when `stream`; for the staging too when `nt_stage` (and the staging side of the
// vector loop is aligned; else cached stores). Returns whether the staging was streamed.
bool fused_step(const uint8_t* in, uint8_t* stage, uint8_t* own, size_t n_in, const uint8_t* peer,
                uint8_t* pout, size_t n_out, bool stream, bool nt_stage) {
  size_t n = std::min(n_in, n_out), done = 0;
  const bool avx512 = use_avx512();
  const size_t vec = avx512 ? 64 : 32;
  static const bool avx2 = __builtin_cpu_supports("avx2");
  bool streamed = false;
  if (stream && n >= 4096 && (avx512 || avx2)) {
    // Align the peer's destination; the own block shares its alignment unless the block size
    // is odd (then it is copied on its own below).
    const size_t head = (vec - (reinterpret_cast<uintptr_t>(pout) & (vec - 1))) & (vec - 1);
    std::memcpy(stage, in, head);
    if (own) std::memcpy(own, in, head);
    std::memcpy(pout, peer, head);
    uint8_t* own_v =
        own && ((reinterpret_cast<uintptr_t>(own + head) & (vec - 1)) == 0) ? own + head : nullptr;
    streamed = nt_stage && (reinterpret_cast<uintptr_t>(stage + head) & (vec - 1)) == 0;
    const size_t body = (n - head) / (2 * vec) * (2 * vec);
    auto run = [&]<bool kOwn, bool kNt>() {
      if (avx512) {
        fused_avx512<kOwn, kNt>(in + head, stage + head, own_v, peer + head, pout + head, body);
      } else {
        fused_avx2<kOwn, kNt>(in + head, stage + head, own_v, peer + head, pout + head, body);
      }
    };
    if (own_v) {
      streamed ? run.template operator()<true, true>() : run.template operator()<true, false>();
    } else {
      streamed ? run.template operator()<false, true>() : run.template operator()<false, false>();
    }
    if (own && !own_v) copy_out(own + head, in + head, body, stream);
    done = head + body;
  }
  // Tails (and small or cached steps): one copy after the other.
  std::memcpy(stage + done, in + done, n_in - done);
  if (own) copy_out(own + done, in + done, n_in - done, stream);
  copy_out(pout + done, peer + done, n_out - done, stream);
  return streamed;
}

void allgather_cross(Team& t, const uint8_t* in, uint8_t* out, size_t m, bool in_place,
                     bool stream) {
  const int n = t.size(), me = t.rank();
  const int h = t.acquire_buf(kOp);
  *t.desc(me, h) = StepDesc{reinterpret_cast<uint64_t>(in), 1};
  const uint64_t v = t.post();
  t.release_buf(h);
  if (!in_place) copy_out(out + me * m, in, m, stream);
  int err = 0, failed = -1;
  for (int i = 1; i < n && err == 0; ++i) {
    const int r = (me + i) % n;
    t.wait_peer(r, v, kOp);
    err = xmem::cross_memory_read(static_cast<pid_t>(t.pid(r)), out + r * m, t.desc(r, h)->addr, m,
                                  kCrossPiece);
    if (err != 0) failed = r;
  }
  // Our input may be reused once every peer has read it.
  t.wait_all(t.post(), kOp);
  if (err != 0) {
    throw TransportError("shm_direct all_gather: rank " + std::to_string(me) + " could not read " +
                         std::to_string(m) + " bytes from rank " + std::to_string(failed) +
                         " (pid " + std::to_string(t.pid(failed)) + ") with process_vm_readv: " +
                         std::strerror(err) + "; TPCOMM_SHM_COLL_CMA=off keeps to staging copies");
  }
}

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
  // Reading a peer's large block with process_vm_readv cost as much CPU time per byte as the
  // two staging copies on the development VM (page pinning); blocks up to a few MiB are read
  // directly in auto mode too (Team::cross_direct).
  if (t.cross_direct(m)) {
    allgather_cross(t, in, out, m, in_place, stream);
    return;
  }
  // Pipelined: chunk k + 1 is copied in (and posted) while the peers' chunk k is copied out.
  // Every rank posts chunk k + 1 only after reading every peer's chunk k, so a buffer is free
  // again (acquire_buf) two chunks later without waiting.
  const size_t chunk = t.chunk_for(m);
  const size_t chunks = (m + chunk - 1) / chunk;
  auto len = [&](size_t k) { return std::min(chunk, m - k * chunk); };
  int h = t.acquire_buf(kOp);
  std::memcpy(t.staging(me, h), in, len(0));
  if (!in_place) copy_out(out + me * m, t.staging(me, h), len(0), stream);
  uint64_t v = t.post();
  t.release_buf(h);
  for (size_t k = 0; k < chunks; ++k) {
    const size_t off = k * chunk, c = len(k);
    const bool next = k + 1 < chunks;
    const size_t off1 = off + chunk, c1 = next ? len(k + 1) : 0;
    const int h1 = next ? t.acquire_buf(kOp) : -1;
    for (int i = 1; i < n; ++i) {
      const int r = (me + i) % n;
      t.wait_peer(r, v, kOp);
      if (i == 1 && next) {
        // The policy learns from the steps that move a whole chunk each way.
        t.stage_policy(in_place ? Team::StageUse::AllGather : Team::StageUse::AllGatherOutOfPlace)
            .write(c1, stream && c1 == chunk && c == chunk, [&](bool nt) {
              return fused_step(in + off1, t.staging(me, h1),
                                in_place ? nullptr : out + me * m + off1, c1, t.staging(r, h),
                                out + r * m + off, c, stream, stream && nt);
            });
      } else {
        copy_out(out + r * m + off, t.staging(r, h), c, stream);
      }
    }
    if (next) {
      v = t.post();
      t.release_buf(h1);
      h = h1;
    }
  }
}

}  // namespace tpcomm::coll::shm
