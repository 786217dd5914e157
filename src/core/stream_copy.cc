// Streaming-store copies (see stream_copy.h).
#include "core/stream_copy.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/reduce.h"

namespace tpcomm {

namespace {

__attribute__((target("avx2"))) void stream_copy_avx2(uint8_t* d, const uint8_t* s, size_t n) {
  // Head up to 32-byte alignment of the destination, then whole vectors, then the tail.
  size_t head = (32 - (reinterpret_cast<uintptr_t>(d) & 31)) & 31;
  if (head > n) head = n;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 96), e);
  }
  for (; i + 32 <= n; i += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
  }
  std::memcpy(d + i, s + i, n - i);
  // Streaming stores are weakly ordered: fence them before any flag that publishes the data.
  _mm_sfence();
}

__attribute__((target("avx512f"))) void stream_copy_avx512(uint8_t* d, const uint8_t* s, size_t n) {
  // Head up to 64-byte alignment of the destination, then whole lines, then the tail.
  size_t head = (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63;
  if (head > n) head = n;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  size_t i = 0;
  for (; i + 256 <= n; i += 256) {
    __m512i a = _mm512_loadu_si512(s + i);
    __m512i b = _mm512_loadu_si512(s + i + 64);
    __m512i c = _mm512_loadu_si512(s + i + 128);
    __m512i e = _mm512_loadu_si512(s + i + 192);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i), a);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + 64), b);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + 128), c);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + 192), e);
  }
  for (; i + 64 <= n; i += 64) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i), _mm512_loadu_si512(s + i));
  }
  std::memcpy(d + i, s + i, n - i);
  _mm_sfence();
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

// Whole 64-byte lines per store where the reduction kernels run AVX-512 (TPCOMM_REDUCE_ISA
// limits both): measured 9.3-9.7 GB/s per core out of memory against 7.7-8.3 with 32-byte
// streaming stores, both cores copying at once.
bool use_avx512() { return kernels::active_isa() >= kernels::ReduceIsa::Avx512; }

}  // namespace

void copy_bytes(void* dst, const void* src, size_t bytes, bool stream) {
  if (bytes == 0) return;
  if (stream && bytes >= 4096 && use_avx512()) {
    stream_copy_avx512(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), bytes);
  } else if (stream && bytes >= 4096 && have_avx2()) {
    stream_copy_avx2(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

}  // namespace tpcomm
