#include "p2p/wire.h"

#include <bit>
#include <cstring>

namespace tpcomm::p2p {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the p2p wire format is little-endian; add byte swapping for this host");

template <class T>
void put(uint8_t*& p, T v) {
  std::memcpy(p, &v, sizeof v);
  p += sizeof v;
}

template <class T>
T get(const uint8_t*& p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}

}  // namespace

size_t encode_header(const Header& h, uint8_t* out) {
  uint8_t* p = out;
  put<uint8_t>(p, kWireMagic);
  put<uint8_t>(p, kWireVersion);
  put<uint8_t>(p, static_cast<uint8_t>(h.type));
  put<uint8_t>(p, static_cast<uint8_t>(h.dtype));
  put<uint32_t>(p, h.credits);
  put<uint64_t>(p, h.group);
  put<int32_t>(p, h.src);
  put<int32_t>(p, h.tag);
  put<uint64_t>(p, h.seq);
  put<uint64_t>(p, h.bytes);
  return static_cast<size_t>(p - out);
}

size_t encode_rts(const Header& hdr, const Rts& r, uint8_t* out) {
  Header h = hdr;
  h.type = MsgType::Rts;
  uint8_t* p = out + encode_header(h, out);
  put<uint32_t>(p, r.send_id);
  return static_cast<size_t>(p - out);
}

size_t encode_rts_data(const Header& hdr, const Rts& r, uint8_t* out) {
  Header h = hdr;
  h.type = MsgType::RtsData;
  uint8_t* p = out + encode_header(h, out);
  put<uint32_t>(p, r.send_id);
  put<uint32_t>(p, r.data_id);
  return static_cast<size_t>(p - out);
}

size_t encode_cts(const Header& hdr, const Cts& c, uint8_t* out) {
  Header h = hdr;
  h.type = MsgType::Cts;
  uint8_t* p = out + encode_header(h, out);
  put<uint32_t>(p, c.send_id);
  put<uint32_t>(p, c.recv_id);
  put<uint32_t>(p, c.status);
  put<uint64_t>(p, c.chunk);
  put<uint64_t>(p, c.key.addr);
  put<uint64_t>(p, c.key.length);
  put<uint16_t>(p, c.key.blob_size);
  size_t reason = std::min(c.reason.size(), kMaxReason);
  put<uint16_t>(p, static_cast<uint16_t>(reason));
  std::memcpy(p, c.key.blob_data, c.key.blob_size);
  p += c.key.blob_size;
  std::memcpy(p, c.reason.data(), reason);
  p += reason;
  return static_cast<size_t>(p - out);
}

bool parse_eager(std::span<const uint8_t> msg, int peer, Header* h) {
  if (msg.size() < kHeaderSize) return false;
  const uint8_t* p = msg.data();
  if (p[0] != kWireMagic || p[1] != kWireVersion || p[2] != static_cast<uint8_t>(MsgType::Eager) ||
      p[3] >= kNumDTypes)
    return false;
  h->type = MsgType::Eager;
  h->dtype = static_cast<DType>(p[3]);
  p += 4;
  h->credits = get<uint32_t>(p);
  h->group = get<uint64_t>(p);
  h->src = get<int32_t>(p);
  h->tag = get<int32_t>(p);
  h->seq = get<uint64_t>(p);
  h->bytes = get<uint64_t>(p);
  return h->src == peer && msg.size() - kHeaderSize == h->bytes;
}

std::optional<Decoded> decode(std::span<const uint8_t> msg, int peer, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<Decoded> {
    *error = "malformed message from rank " + std::to_string(peer) + " (" +
             std::to_string(msg.size()) + " bytes): " + why;
    return std::nullopt;
  };
  if (msg.size() < kHeaderSize) return fail("shorter than the 40-byte header");
  const uint8_t* p = msg.data();
  Decoded d;
  Header& h = d.header;
  uint8_t magic = get<uint8_t>(p);
  uint8_t version = get<uint8_t>(p);
  uint8_t type = get<uint8_t>(p);
  uint8_t dtype = get<uint8_t>(p);
  if (magic != kWireMagic) return fail("bad magic " + std::to_string(magic));
  if (version != kWireVersion)
    return fail("protocol version " + std::to_string(version) + ", this build speaks " +
                std::to_string(kWireVersion) + " (mixed tpcomm versions in one job?)");
  if (type < 1 || type > 5) return fail("unknown type " + std::to_string(type));
  if (dtype >= kNumDTypes) return fail("unknown dtype " + std::to_string(dtype));
  h.type = static_cast<MsgType>(type);
  h.dtype = static_cast<DType>(dtype);
  h.credits = get<uint32_t>(p);
  h.group = get<uint64_t>(p);
  h.src = get<int32_t>(p);
  h.tag = get<int32_t>(p);
  h.seq = get<uint64_t>(p);
  h.bytes = get<uint64_t>(p);
  if (h.src != peer)
    return fail("claims source rank " + std::to_string(h.src) + " on the link to rank " +
                std::to_string(peer));
  size_t rest = msg.size() - kHeaderSize;
  switch (h.type) {
    case MsgType::Eager:
      if (rest != h.bytes)
        return fail("eager payload of " + std::to_string(rest) + " bytes, header says " +
                    std::to_string(h.bytes));
      d.payload = msg.subspan(kHeaderSize);
      break;
    case MsgType::Credit:
      if (rest != 0) return fail("credit message with a payload");
      break;
    case MsgType::Rts:
      if (msg.size() != kRtsSize) return fail("RTS of the wrong size");
      d.rts.send_id = get<uint32_t>(p);
      break;
    case MsgType::RtsData:
      if (msg.size() != kRtsDataSize) return fail("RTS with data of the wrong size");
      d.rts.send_id = get<uint32_t>(p);
      d.rts.data_id = get<uint32_t>(p);
      break;
    case MsgType::Cts: {
      if (msg.size() < kCtsFixed) return fail("CTS shorter than its fixed part");
      Cts& c = d.cts;
      c.send_id = get<uint32_t>(p);
      c.recv_id = get<uint32_t>(p);
      c.status = get<uint32_t>(p);
      c.chunk = get<uint64_t>(p);
      c.key.addr = get<uint64_t>(p);
      c.key.length = get<uint64_t>(p);
      uint16_t blob = get<uint16_t>(p);
      uint16_t reason = get<uint16_t>(p);
      if (blob > transport::RemoteKey::kMaxBlob) return fail("remote key blob too large");
      if (reason > kMaxReason) return fail("refusal reason too long");
      if (msg.size() != kCtsFixed + blob + reason) return fail("CTS lengths do not add up");
      if (c.status == 0 && c.chunk == 0 && h.bytes > 0) return fail("CTS with chunk size 0");
      c.key.blob_size = blob;
      std::memcpy(c.key.blob_data, p, blob);
      p += blob;
      c.reason.assign(reinterpret_cast<const char*>(p), reason);
      break;
    }
  }
  return d;
}

}  // namespace tpcomm::p2p
