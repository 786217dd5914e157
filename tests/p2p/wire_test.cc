// The p2p wire format: round trips, and every malformed input refused with a reason.
#include "p2p/wire.h"

#include <gtest/gtest.h>

#include <vector>

namespace tpcomm::p2p {
namespace {

std::vector<uint8_t> eager(const Header& h, size_t payload) {
  std::vector<uint8_t> b(kHeaderSize + payload, 0x5A);
  encode_header(h, b.data());
  return b;
}

TEST(Wire, EagerRoundTrip) {
  Header h;
  h.type = MsgType::Eager;
  h.dtype = DType::Float32;
  h.credits = 3;
  h.group = 0x1122334455667788ull;
  h.src = 4;
  h.tag = -9;
  h.seq = 77;
  h.bytes = 12;
  auto b = eager(h, 12);
  std::string err;
  auto d = decode(b, 4, &err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(d->header.group, h.group);
  EXPECT_EQ(d->header.tag, -9);
  EXPECT_EQ(d->header.seq, 77u);
  EXPECT_EQ(d->header.credits, 3u);
  EXPECT_EQ(d->payload.size(), 12u);
}

TEST(Wire, CtsRoundTrip) {
  Header h;
  h.src = 1;
  h.bytes = 1 << 20;
  Cts c;
  c.send_id = 5;
  c.recv_id = 6;
  c.chunk = 1 << 20;
  c.key.addr = 0xdeadbeef;
  c.key.length = 1 << 20;
  uint8_t blob[3] = {1, 2, 3};
  c.key.set_blob(blob);
  std::vector<uint8_t> b(kMaxCtsSize);
  b.resize(encode_cts(h, c, b.data()));
  std::string err;
  auto d = decode(b, 1, &err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(d->header.type, MsgType::Cts);
  EXPECT_EQ(d->cts.recv_id, 6u);
  EXPECT_EQ(d->cts.key.addr, 0xdeadbeefu);
  ASSERT_EQ(d->cts.key.blob().size(), 3u);
  EXPECT_EQ(d->cts.key.blob()[2], 3);
}

TEST(Wire, MalformedInputIsRefused) {
  Header h;
  h.src = 2;
  h.bytes = 4;
  std::string err;
  auto good = eager(h, 4);
  EXPECT_FALSE(decode(std::span<const uint8_t>(good.data(), 10), 2, &err));
  EXPECT_NE(err.find("shorter than"), std::string::npos);
  auto bad = good;
  bad[0] = 0;
  EXPECT_FALSE(decode(bad, 2, &err));
  EXPECT_NE(err.find("bad magic"), std::string::npos);
  bad = good;
  bad[1] = 9;
  EXPECT_FALSE(decode(bad, 2, &err));
  EXPECT_NE(err.find("protocol version 9"), std::string::npos);
  bad = good;
  bad[2] = 42;
  EXPECT_FALSE(decode(bad, 2, &err));
  EXPECT_NE(err.find("unknown type"), std::string::npos);
  bad = good;
  bad[3] = 200;
  EXPECT_FALSE(decode(bad, 2, &err));
  EXPECT_NE(err.find("unknown dtype"), std::string::npos);
  EXPECT_FALSE(decode(good, 3, &err));
  EXPECT_NE(err.find("claims source rank 2"), std::string::npos);
  auto longer = eager(h, 5);
  EXPECT_FALSE(decode(longer, 2, &err));
  EXPECT_NE(err.find("header says 4"), std::string::npos);
  // A CTS whose blob length points past the end.
  Cts c;
  c.chunk = 1;
  std::vector<uint8_t> cts(kMaxCtsSize);
  cts.resize(encode_cts(h, c, cts.data()));
  cts[kCtsFixed - 4] = 0xFF;  // blob size low byte
  cts[kCtsFixed - 3] = 0x00;
  EXPECT_FALSE(decode(cts, 2, &err));
  EXPECT_NE(err.find("blob too large"), std::string::npos);
}

}  // namespace
}  // namespace tpcomm::p2p
