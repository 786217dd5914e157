// SHA-256 against the FIPS 180-2 examples and HMAC-SHA256 against RFC 4231's test cases.
#include "core/sha256.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tpcomm::crypto {
namespace {

std::span<const uint8_t> bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Sha256, Fips180Examples) {
  EXPECT_EQ(to_hex(sha256(bytes(""))),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(to_hex(sha256(bytes("abc"))),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(to_hex(sha256(bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  EXPECT_EQ(to_hex(sha256(bytes(million))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // The same, fed in uneven pieces (buffering across block boundaries).
  Sha256 s;
  for (size_t off = 0, step = 1; off < million.size(); off += step, step = step % 97 + 13)
    s.update(million.data() + off, std::min(step, million.size() - off));
  EXPECT_EQ(to_hex(s.final()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
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
      {{'J', 'e', 'f', 'e'}, "what do ya want for nothing?",
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
    EXPECT_EQ(to_hex(hmac_sha256(cases[i].key, bytes(cases[i].data))), cases[i].want)
        << "RFC 4231 case " << i;
  Digest a = sha256(bytes("x")), b = a;
  EXPECT_TRUE(digest_equal(a, b));
  b[31] ^= 1;
  EXPECT_FALSE(digest_equal(a, b));
}

}  // namespace
}  // namespace tpcomm::crypto
