// The RTS of a message whose data travels as tagged data (MsgType::RtsData, transports with
// Capabilities::tagged_data): round trip, and wrong sizes refused with a reason.
#include <gtest/gtest.h>

#include <vector>

#include "p2p/wire.h"

namespace tpcomm::p2p {
namespace {

TEST(WireRtsData, RoundTrip) {
  Header h;
  h.src = 2;
  h.tag = 7;
  h.seq = 11;
  h.bytes = 1 << 20;
  h.dtype = DType::Float32;
  std::vector<uint8_t> b(kRtsDataSize);
  ASSERT_EQ(encode_rts_data(h, Rts{0x12345, 0x3fffffff}, b.data()), kRtsDataSize);
  std::string err;
  auto d = decode(b, 2, &err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(d->header.type, MsgType::RtsData);
  EXPECT_EQ(d->header.bytes, 1u << 20);
  EXPECT_EQ(d->header.seq, 11u);
  EXPECT_EQ(d->rts.send_id, 0x12345u);
  EXPECT_EQ(d->rts.data_id, 0x3fffffffu);
  // Not an eager message for the latency path.
  Header e;
  EXPECT_FALSE(parse_eager(b, 2, &e));
}

TEST(WireRtsData, WrongSizesAreRefused) {
  Header h;
  h.src = 2;
  std::vector<uint8_t> b(kRtsDataSize + 1);
  encode_rts_data(h, Rts{1, 2}, b.data());
  std::string err;
  EXPECT_FALSE(decode(b, 2, &err));
  EXPECT_NE(err.find("RTS with data of the wrong size"), std::string::npos) << err;
  b.resize(kRtsDataSize - 1);
  EXPECT_FALSE(decode(b, 2, &err));
  EXPECT_NE(err.find("RTS with data of the wrong size"), std::string::npos) << err;
  // A plain RTS's size under the RtsData type is refused too.
  std::vector<uint8_t> plain(kRtsSize);
  encode_rts(h, Rts{1}, plain.data());
  plain[2] = static_cast<uint8_t>(MsgType::RtsData);
  EXPECT_FALSE(decode(plain, 2, &err));
}

}  // namespace
}  // namespace tpcomm::p2p
