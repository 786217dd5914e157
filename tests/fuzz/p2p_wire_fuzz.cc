// Fuzz target: the p2p protocol's message decoder and the tcp transport's handshake and frame
// decoders must refuse garbage with a reason, never crash or over-read (DESIGN.md 5); the
// latency path's eager parse must agree with the decoder.
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "p2p/wire.h"
#include "transports/tcp/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string err;
  // Mostly the source the header claims (to get past that check), sometimes another.
  uint32_t raw = 0;
  if (size >= 20) std::memcpy(&raw, data + 16, 4);
  if (size > 0 && (data[size - 1] & 7) == 0) raw += 1;  // unsigned: wraps without UB
  int32_t peer = static_cast<int32_t>(raw);
  auto d = tpcomm::p2p::decode(std::span<const uint8_t>(data, size), peer, &err);
  if (d && d->header.type == tpcomm::p2p::MsgType::Eager && d->payload.size() != d->header.bytes)
    __builtin_trap();
  // The latency path's parse accepts exactly the eager messages decode() accepts, with the
  // same header.
  tpcomm::p2p::Header e;
  const bool fast = tpcomm::p2p::parse_eager(std::span<const uint8_t>(data, size), peer, &e);
  const bool eager = d && d->header.type == tpcomm::p2p::MsgType::Eager;
  if (fast != eager) __builtin_trap();
  if (fast && (e.dtype != d->header.dtype || e.credits != d->header.credits ||
               e.group != d->header.group || e.src != d->header.src || e.tag != d->header.tag ||
               e.seq != d->header.seq || e.bytes != d->header.bytes))
    __builtin_trap();
  tpcomm::tcp::Hello h;
  tpcomm::tcp::decode_hello(data, size, &h, &err);
  tpcomm::tcp::Ack a;
  tpcomm::tcp::decode_ack(data, size, &a, &err);
  if (size >= tpcomm::tcp::kFrameSize) tpcomm::tcp::decode_frame(data, 1 << 16, &err);
  return 0;
}

// Valid messages of every kind, for the replay driver to mutate.
extern "C" size_t tpcomm_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  using namespace tpcomm::p2p;
  Header h;
  h.src = 3;
  h.bytes = 5;
  std::vector<uint8_t> eager(kHeaderSize + 5, 7);
  encode_header(h, eager.data());
  eager[0] = kWireMagic;
  out->push_back(eager);
  std::vector<uint8_t> rts(kRtsSize);
  encode_rts(h, Rts{9}, rts.data());
  out->push_back(rts);
  std::vector<uint8_t> rts_data(kRtsDataSize);
  encode_rts_data(h, Rts{9, 10}, rts_data.data());
  out->push_back(rts_data);
  Cts c;
  c.chunk = 5;
  c.reason = "why";
  uint8_t blob[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  c.key.set_blob(blob);
  std::vector<uint8_t> cts(kMaxCtsSize);
  cts.resize(encode_cts(h, c, cts.data()));
  out->push_back(cts);
  tpcomm::tcp::Hello hello;
  hello.job_id = "job";
  std::vector<uint8_t> hb(tpcomm::tcp::kHelloFixed + tpcomm::tcp::kMaxJobId);
  hb.resize(tpcomm::tcp::encode_hello(hello, hb.data()));
  out->push_back(hb);
  return out->size();
}
