// HMAC-SHA256 through libcrypto (hmac.h).
#include "core/hmac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "tpcomm/error.hpp"

namespace tpcomm::crypto {

Digest hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> msg) {
  Digest d{};
  unsigned int len = 0;
  // HMAC() takes a key pointer that must not be null, even for an empty key.
  static const uint8_t kEmpty = 0;
  const uint8_t* k = key.empty() ? &kEmpty : key.data();
  if (!HMAC(EVP_sha256(), k, static_cast<int>(key.size()), msg.data(), msg.size(), d.data(),
            &len) ||
      len != d.size())
    throw Error("HMAC-SHA256 failed in libcrypto");
  return d;
}

bool digest_equal(const Digest& a, const Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace tpcomm::crypto
