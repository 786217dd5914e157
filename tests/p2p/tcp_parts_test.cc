// The tcp transport's pure parts: NCCL-style interface matching and its stream formats.
#include <gtest/gtest.h>

#include "transports/tcp/ifname.h"
#include "transports/tcp/wire.h"

namespace tpcomm::tcp {
namespace {

TEST(TcpIfname, NcclSyntax) {
  EXPECT_TRUE(ifname_matches("", "eth0"));
  EXPECT_TRUE(ifname_matches("eth", "eth0"));
  EXPECT_FALSE(ifname_matches("eth", "ib0"));
  EXPECT_TRUE(ifname_matches("eth,ib", "ib1"));
  EXPECT_FALSE(ifname_matches("^docker,lo", "lo"));
  EXPECT_FALSE(ifname_matches("^docker,lo", "docker0"));
  EXPECT_TRUE(ifname_matches("^docker,lo", "eth0"));
  EXPECT_TRUE(ifname_matches("=eth0", "eth0"));
  EXPECT_FALSE(ifname_matches("=eth0", "eth01"));
  EXPECT_FALSE(ifname_matches("^=eth0", "eth0"));
  EXPECT_TRUE(ifname_matches("^=eth0", "eth01"));
}

TEST(TcpIfname, SelectsLoopbackWhenNothingElseAndExplainsEmptySelections) {
  auto lo = select_interfaces("lo", AF_INET);
  ASSERT_FALSE(lo.empty());
  EXPECT_EQ(lo.front().ip, "127.0.0.1");
  try {
    select_interfaces("nosuchif", 0);
    FAIL() << "expected InvalidArgument";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("selects no interface"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("lo("), std::string::npos) << e.what();
  }
}

TEST(TcpWire, HelloAndAckRoundTripAndRefuseGarbage) {
  Hello h;
  h.nsocks = 4;
  h.index = 3;
  h.src = 1;
  h.dst = 0;
  h.world_size = 8;
  h.job_id = "job42";
  uint8_t buf[kHelloFixed + kMaxJobId];
  size_t n = encode_hello(h, buf);
  Hello g;
  std::string err;
  EXPECT_EQ(decode_hello(buf, 5, &g, &err), kHelloFixed);  // needs more
  EXPECT_EQ(decode_hello(buf, n, &g, &err), n);
  EXPECT_EQ(g.job_id, "job42");
  EXPECT_EQ(g.index, 3);
  buf[0] ^= 1;
  EXPECT_EQ(decode_hello(buf, n, &g, &err), 0u);
  EXPECT_NE(err.find("bad magic"), std::string::npos);
  buf[0] ^= 1;
  buf[8] = 9;  // index >= nsocks
  EXPECT_EQ(decode_hello(buf, n, &g, &err), 0u);
  Ack a;
  a.status = 1;
  a.reason = "no";
  uint8_t ab[kAckFixed + kMaxReason];
  size_t an = encode_ack(a, ab);
  Ack b;
  EXPECT_EQ(decode_ack(ab, an, &b, &err), an);
  EXPECT_EQ(b.reason, "no");
}

TEST(TcpWire, FramesAreValidated) {
  Frame f;
  f.kind = FrameKind::Put;
  f.len = 10;
  f.total = 100;
  f.offset = 5;
  uint8_t b[kFrameSize];
  encode_frame(f, b);
  std::string err;
  auto d = decode_frame(b, 1024, &err);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->total, 100u);
  f.kind = FrameKind::Msg;
  f.len = 4096;
  encode_frame(f, b);
  EXPECT_FALSE(decode_frame(b, 1024, &err));
  EXPECT_NE(err.find("exceeds"), std::string::npos);
  b[0] = 77;
  EXPECT_FALSE(decode_frame(b, 1024, &err));
  // Control frames (goodbye, the move of a pair's messages) carry nothing.
  for (FrameKind k : {FrameKind::Bye, FrameKind::Switch}) {
    Frame c;
    c.kind = k;
    encode_frame(c, b);
    auto ok = decode_frame(b, 1024, &err);
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->kind, k);
    c.len = 1;
    encode_frame(c, b);
    EXPECT_FALSE(decode_frame(b, 1024, &err));
    EXPECT_NE(err.find("control frame"), std::string::npos);
  }
  b[0] = 5;  // no such kind
  EXPECT_FALSE(decode_frame(b, 1024, &err));
}

}  // namespace
}  // namespace tpcomm::tcp
