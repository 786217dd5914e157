// Streaming-store copies (see stream_copy.h).
#include "core/stream_copy.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

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

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

}  // namespace

void copy_bytes(void* dst, const void* src, size_t bytes, bool stream) {
  if (bytes == 0) return;
  if (stream && bytes >= 4096 && have_avx2()) {
    stream_copy_avx2(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

}  // namespace tpcomm
