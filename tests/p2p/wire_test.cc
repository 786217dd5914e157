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

// parse_eager (the latency path) accepts exactly the eager messages decode() accepts, with the
// same header: every single-byte corruption and every truncation of a good message agrees.
TEST(Wire, ParseEagerAgreesWithDecode) {
  Header h;
  h.dtype = DType::Int32;
  h.credits = 2;
  h.group = 0x0102030405060708ull;
  h.src = 3;
  h.tag = 11;
  h.seq = 5;
  h.bytes = 8;
  auto good = eager(h, 8);
  Header p;
  ASSERT_TRUE(parse_eager(good, 3, &p));
  EXPECT_EQ(p.group, h.group);
  EXPECT_EQ(p.tag, 11);
  EXPECT_EQ(p.seq, 5u);
  EXPECT_EQ(p.bytes, 8u);
  EXPECT_EQ(p.credits, 2u);
  EXPECT_EQ(p.dtype, DType::Int32);
  EXPECT_FALSE(parse_eager(good, 4, &p)) << "another peer's rank";
  auto agree = [&](const std::vector<uint8_t>& m) {
    std::string err;
    auto d = decode(m, 3, &err);
    Header q;
    bool fast = parse_eager(m, 3, &q);
    bool slow = d && d->header.type == MsgType::Eager;
    EXPECT_EQ(fast, slow) << err;
    if (fast && slow) {
      EXPECT_EQ(q.group, d->header.group);
      EXPECT_EQ(q.src, d->header.src);
      EXPECT_EQ(q.tag, d->header.tag);
      EXPECT_EQ(q.seq, d->header.seq);
      EXPECT_EQ(q.bytes, d->header.bytes);
      EXPECT_EQ(q.dtype, d->header.dtype);
    }
  };
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t v :
         {uint8_t{0}, uint8_t{1}, uint8_t{2}, uint8_t{4}, uint8_t{0xA7}, uint8_t{0xFF}}) {
      auto m = good;
      m[i] = v;
      agree(m);
    }
  }
  for (size_t n = 0; n <= good.size(); ++n)
    agree(std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(n)));
  std::vector<uint8_t> rts(kRtsSize);
  encode_rts(h, Rts{9}, rts.data());
  agree(rts);
}

}  // namespace
}  // namespace tpcomm::p2p
