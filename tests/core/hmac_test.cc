// HMAC-SHA256 (libcrypto) against RFC 4231's test cases, the constant-time comparison, and the
// handshake's proof as the HMAC of its documented message.
#include "core/hmac.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/auth.h"

namespace tpcomm::crypto {
namespace {

std::span<const uint8_t> bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(HmacSha256, Rfc4231TestCases) {
  struct Case {
    std::vector<uint8_t> key;
    std::string data;
    const char* want;
  };
  std::vector<uint8_t> k4;
  for (uint8_t i = 1; i <= 25; ++i) k4.push_back(i);
  std::string big_key_data = "Test Using Larger Than Block-Size Key - Hash Key First";
  std::string big_both =
      "This is a test using a larger than block-size key and a larger than block-size data. The "
      "key needs to be hashed before being used by the HMAC algorithm.";
  std::vector<Case> cases = {
      {std::vector<uint8_t>(20, 0x0b), "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {{'J', 'e', 'f', 'e'},
       "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::vector<uint8_t>(20, 0xaa), std::string(50, '\xdd'),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {k4, std::string(50, '\xcd'),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {std::vector<uint8_t>(131, 0xaa), big_key_data,
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {std::vector<uint8_t>(131, 0xaa), big_both,
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(auth::hex(hmac_sha256(cases[i].key, bytes(cases[i].data))), cases[i].want)
        << "RFC 4231 case " << i;
  EXPECT_EQ(auth::hex(hmac_sha256({}, {})),
            "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad")
      << "empty key and message";
  Digest a = hmac_sha256(bytes("k"), bytes("x")), b = a;
  EXPECT_TRUE(digest_equal(a, b));
  b[31] ^= 1;
  EXPECT_FALSE(digest_equal(a, b));
  b = a;
  b[0] ^= 0x80;
  EXPECT_FALSE(digest_equal(a, b));
}

TEST(HmacSha256, ProofIsTheHmacOfRoleJobAndNonces) {
  std::vector<uint8_t> n1 = {1, 2, 3}, n2 = {0xfe, 0xff};
  static const char kMsg[] = "store-client\0job\0\x01\x02\x03\xfe\xff";
  std::string msg(kMsg, sizeof kMsg - 1);
  EXPECT_EQ(auth::proof("secret", "store-client", "job", n1, n2),
            hmac_sha256(bytes("secret"), bytes(msg)));
  EXPECT_NE(auth::proof("secret", "store-client", "job", n1, n2),
            auth::proof("secret", "store-server", "job", n1, n2));
}

}  // namespace
}  // namespace tpcomm::crypto
