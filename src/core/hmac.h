// HMAC-SHA256 and a constant-time comparison for the shared-secret challenge and response of
// store and data connections (TPCOMM_AUTH_SECRET), from OpenSSL's libcrypto.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace tpcomm::crypto {

using Digest = std::array<uint8_t, 32>;

/// HMAC-SHA256 of `msg` under `key` (any length).
Digest hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> msg);
/// Compares two digests in time independent of where they differ (CRYPTO_memcmp).
bool digest_equal(const Digest& a, const Digest& b);

}  // namespace tpcomm::crypto
