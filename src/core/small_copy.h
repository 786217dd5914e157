// Copies of a few bytes without a library call: the latency path's receive copies an 8-byte
// payload out of the transport's buffer, where the call to the C library's memcpy (through the
// PLT, then its size dispatch) costs as much as the copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tpcomm {

/// Up to 64 bytes: two fixed-size copies that overlap in the middle (each a load and a store
/// the compiler emits inline). Larger sizes: memcpy. The ranges must not overlap.
[[gnu::always_inline]] inline void copy_small(void* dst, const void* src, size_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  if (n <= 16) {
    if (n >= 8) {
      uint64_t a, b;
      std::memcpy(&a, s, 8);
      std::memcpy(&b, s + n - 8, 8);
      std::memcpy(d, &a, 8);
      std::memcpy(d + n - 8, &b, 8);
    } else if (n >= 4) {
      uint32_t a, b;
      std::memcpy(&a, s, 4);
      std::memcpy(&b, s + n - 4, 4);
      std::memcpy(d, &a, 4);
      std::memcpy(d + n - 4, &b, 4);
    } else if (n > 0) {
      d[0] = s[0];
      d[n / 2] = s[n / 2];
      d[n - 1] = s[n - 1];
    }
  } else if (n <= 32) {
    uint8_t a[16], b[16];
    std::memcpy(a, s, 16);
    std::memcpy(b, s + n - 16, 16);
    std::memcpy(d, a, 16);
    std::memcpy(d + n - 16, b, 16);
  } else if (n <= 64) {
    uint8_t a[32], b[32];
    std::memcpy(a, s, 32);
    std::memcpy(b, s + n - 32, 32);
    std::memcpy(d, a, 32);
    std::memcpy(d + n - 32, b, 32);
  } else {
    std::memcpy(d, s, n);
  }
}

}  // namespace tpcomm
