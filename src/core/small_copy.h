// Copies of a few bytes without a library call: the latency path's receive copies an 8-byte
// payload out of the transport's buffer, where the call to the C library's memcpy (through the
// PLT, then its size dispatch) costs as much as the copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tpcomm {

/// Copies n bytes, N <= n <= 2N, as two N-byte copies from both ends (they overlap in the
/// middle): each a load and a store the compiler emits inline.
template <size_t N>
[[gnu::always_inline]] inline void copy_ends(uint8_t* d, const uint8_t* s, size_t n) {
  uint8_t a[N], b[N];
  std::memcpy(a, s, N);
  std::memcpy(b, s + n - N, N);
  std::memcpy(d, a, N);
  std::memcpy(d + n - N, b, N);
}

/// Up to 64 bytes inline (copy_ends); larger sizes: memcpy. The ranges must not overlap.
[[gnu::always_inline]] inline void copy_small(void* dst, const void* src, size_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  if (n <= 16) {
    if (n >= 8) {
      copy_ends<8>(d, s, n);
    } else if (n >= 4) {
      copy_ends<4>(d, s, n);
    } else if (n > 0) {
      d[0] = s[0];
      d[n / 2] = s[n / 2];
      d[n - 1] = s[n - 1];
    }
  } else if (n <= 32) {
    copy_ends<16>(d, s, n);
  } else if (n <= 64) {
    copy_ends<32>(d, s, n);
  } else {
    std::memcpy(d, s, n);
  }
}

}  // namespace tpcomm
