// The TCPStore wire decoder on hand-made frames: round trips and each refusal.
#include "store/tcp_store_wire.h"

#include <gtest/gtest.h>

#include <cstring>

namespace tpcomm::store_wire {
namespace {

Limits small() {
  Limits l;
  l.max_key = 8;
  l.max_value = 16;
  return l;
}

std::vector<uint8_t> set_frame(const std::string& k, const std::string& v, uint16_t flags = 0) {
  std::vector<uint8_t> b;
  Writer w(&b);
  w.begin(Op::kSet, 42, flags);
  w.str(k);
  w.str(v);
  w.end();
  return b;
}

TEST(StoreWire, RoundTripOfARequest) {
  auto b = set_frame("key", "value", kFlagNoReply);
  Header h;
  ASSERT_EQ(decode_header(b.data(), b.size(), small(), &h), HeaderStatus::kOk);
  EXPECT_EQ(h.id, 42u);
  EXPECT_EQ(h.length, b.size() - kHeaderSize);
  Request r;
  DecodeError err;
  ASSERT_TRUE(decode_request(h, b.data() + kHeaderSize, small(), &r, &err)) << err.message;
  EXPECT_EQ(r.key, "key");
  EXPECT_EQ(std::string(r.value.begin(), r.value.end()), "value");
  EXPECT_EQ(r.flags, kFlagNoReply);
  EXPECT_EQ(decode_stream(b.data(), b.size(), small(), true), 1u);
}

TEST(StoreWire, HeaderRefusals) {
  auto b = set_frame("k", "v");
  Header h;
  EXPECT_EQ(decode_header(b.data(), 2, small(), &h), HeaderStatus::kNeedMore);
  EXPECT_EQ(decode_header(b.data(), 10, small(), &h), HeaderStatus::kNeedMore);
  const uint8_t http[] = {'G', 'E'};
  EXPECT_EQ(decode_header(http, 2, small(), &h), HeaderStatus::kBadMagic);
  auto v2 = b;
  v2[4] = 9;
  EXPECT_EQ(decode_header(v2.data(), v2.size(), small(), &h), HeaderStatus::kBadVersion);
  auto big = b;
  uint64_t len = uint64_t{1} << 62;
  std::memcpy(big.data() + 12, &len, 8);
  EXPECT_EQ(decode_header(big.data(), big.size(), small(), &h), HeaderStatus::kTooLarge);
  EXPECT_GE(h.length, kAbsurdLength);
}

TEST(StoreWire, PayloadRefusals) {
  Request r;
  DecodeError err;
  Header h;
  auto check = [&](const std::vector<uint8_t>& b, ErrorCode code, const std::string& part) {
    ASSERT_EQ(decode_header(b.data(), b.size(), small(), &h), HeaderStatus::kOk);
    EXPECT_FALSE(decode_request(h, b.data() + kHeaderSize, small(), &r, &err));
    EXPECT_EQ(err.code, code);
    EXPECT_NE(err.message.find(part), std::string::npos) << err.message;
  };
  check(set_frame("much-too-long-key", "v"), ErrorCode::kTooLarge, "TPCOMM_STORE_MAX_KEY=8");
  check(set_frame("k", std::string(17, 'v')), ErrorCode::kTooLarge, "TPCOMM_STORE_MAX_VALUE=16");
  auto trunc = set_frame("k", "v");
  trunc[kHeaderSize] = 100;  // key length beyond the payload
  check(trunc, ErrorCode::kBadFrame, "truncated");
  std::vector<uint8_t> stray;
  Writer w(&stray);
  w.begin(Op::kGet, 1);
  w.str("k");
  w.u32(7);
  w.end();
  check(stray, ErrorCode::kBadFrame, "stray bytes");
  auto flags = set_frame("k", "v", 4);
  check(flags, ErrorCode::kBadFrame, "flags");
}

TEST(StoreWire, RepliesDecode) {
  std::vector<uint8_t> b;
  Writer w(&b);
  w.begin(Op::kValues, 5);
  w.u32(2);
  w.str("a");
  w.str("bc");
  w.end();
  encode_error(&b, 6, ErrorCode::kNotCounter, "not a counter");
  EXPECT_EQ(decode_stream(b.data(), b.size(), small(), false), 2u);
  EXPECT_EQ(decode_stream(b.data(), b.size(), small(), true), 0u);  // not requests
  Header h;
  ASSERT_EQ(decode_header(b.data(), b.size(), small(), &h), HeaderStatus::kOk);
  Reply r;
  std::string err;
  ASSERT_TRUE(decode_reply(h, b.data() + kHeaderSize, &r, &err)) << err;
  ASSERT_EQ(r.values.size(), 2u);
  EXPECT_EQ(r.values[1].size(), 2u);
}

TEST(StoreWire, PrintablePrefix) {
  const uint8_t p[] = {'G', 'E', 'T', '\r', '\n', 0x01};
  EXPECT_EQ(printable_prefix(p, sizeof(p)), "GET\\r\\n\\x01");
}

}  // namespace
}  // namespace tpcomm::store_wire
