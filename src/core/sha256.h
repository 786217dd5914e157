// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the shared-secret challenge and
// response of store and data connections (TPCOMM_AUTH_SECRET): small, dependency-free, and
// tested against the FIPS 180-2 and RFC 4231 vectors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tpcomm::crypto {

using Digest = std::array<uint8_t, 32>;

/// Incremental SHA-256: update() any number of times, then final() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t len);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Digest final();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

/// SHA-256 of `data`.
Digest sha256(std::span<const uint8_t> data);
/// HMAC-SHA256 of `msg` under `key` (any length).
Digest hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> msg);
/// Compares two digests in time independent of where they differ.
bool digest_equal(const Digest& a, const Digest& b);
/// Lower-case hex of a digest (tests, logs of non-secret values).
std::string to_hex(const Digest& d);

}  // namespace tpcomm::crypto
