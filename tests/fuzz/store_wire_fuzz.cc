// Fuzz target of the TCPStore wire decoder: any byte string, decoded as the server would
// (requests) and as the client would (replies), must be accepted or refused without reading
// out of bounds, crashing or allocating what a length field claims.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "store/tcp_store_wire.h"

using tpcomm::store_wire::Limits;
using tpcomm::store_wire::Op;
using tpcomm::store_wire::Writer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Limits limits;
  limits.max_key = 64;
  limits.max_value = 4096;
  tpcomm::store_wire::decode_stream(data, size, limits, /*as_server=*/true);
  tpcomm::store_wire::decode_stream(data, size, limits, /*as_server=*/false);
  return 0;
}

// Valid frames of every op, to mutate.
extern "C" size_t tpcomm_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  auto add = [&](auto fill) {
    std::vector<uint8_t> b;
    Writer w(&b);
    fill(w);
    w.end();
    out->push_back(std::move(b));
  };
  add([](Writer& w) {
    w.begin(Op::kHello, 1);
    w.str("default");
    w.str("host:1");
    w.u32(0);
  });
  add([](Writer& w) {
    w.begin(Op::kSet, 2, tpcomm::store_wire::kFlagNoReply);
    w.str("key");
    w.str("value");
  });
  add([](Writer& w) {
    w.begin(Op::kGet, 3);
    w.str("key");
  });
  add([](Writer& w) {
    w.begin(Op::kAdd, 4);
    w.str("ctr");
    w.i64(-5);
  });
  add([](Writer& w) {
    w.begin(Op::kCompareSet, 5);
    w.str("k");
    w.str("old");
    w.str("new");
  });
  add([](Writer& w) {
    w.begin(Op::kWait, 6);
    w.u32(2);
    w.str("a");
    w.str("b");
  });
  add([](Writer& w) {
    w.begin(Op::kMultiSet, 7);
    w.u32(2);
    w.str("a");
    w.str("1");
    w.str("b");
    w.str("2");
  });
  add([](Writer& w) {
    w.begin(Op::kCancel, 8);
    w.u32(6);
  });
  add([](Writer& w) {
    w.begin(Op::kHelloOk, 1);
    w.str("server:2");
    w.u64(4096);
    w.u64(1 << 20);
    w.str("tpcomm-store-1-2-3");
  });
  add([](Writer& w) {
    w.begin(Op::kValues, 9);
    w.u32(2);
    w.str("x");
    w.str("yz");
  });
  add([](Writer& w) {
    w.begin(Op::kKeys, 10);
    w.u32(1);
    w.str("missing");
  });
  add([](Writer& w) {
    w.begin(Op::kError, 11);
    w.u16(2);
    w.str("too large");
  });
  // Two frames back to back.
  std::vector<uint8_t> two = (*out)[1];
  two.insert(two.end(), (*out)[2].begin(), (*out)[2].end());
  out->push_back(std::move(two));
  return out->size();
}
