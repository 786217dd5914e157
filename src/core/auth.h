// The job's shared secret (TPCOMM_AUTH_SECRET or TPCOMM_AUTH_SECRET_FILE) and the pieces of
// the challenge-response that proves knowledge of it on a connection: fresh nonces from both
// sides, and proofs HMAC-SHA256(secret, role | job | nonces). The secret never goes on the
// wire; a role string keeps one side's proof from being replayed as the other's.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/hmac.h"

namespace tpcomm::auth {

using Nonce = std::array<uint8_t, 16>;

/// The secret, or "" when authentication is off. ConfigError when TPCOMM_AUTH_SECRET_FILE
/// names a file that cannot be read or is empty.
std::string job_secret();
/// 16 unpredictable bytes (getrandom).
Nonce make_nonce();
/// HMAC-SHA256(secret, role | 0 | job | 0 | first | second).
crypto::Digest proof(const std::string& secret, std::string_view role, std::string_view job,
                     std::span<const uint8_t> first, std::span<const uint8_t> second);
/// Lower-case hex, and back (false when `text` is not 2 * out.size() hex digits).
std::string hex(std::span<const uint8_t> bytes);
bool unhex(std::string_view text, std::span<uint8_t> out);

}  // namespace tpcomm::auth
