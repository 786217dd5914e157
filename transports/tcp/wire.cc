#include "transports/tcp/wire.h"

#include <cstring>

namespace tpcomm::tcp {
namespace {

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

size_t encode_hello(const Hello& h, uint8_t* out) {
  uint8_t* p = out;
  put<uint32_t>(p, kHelloMagic);
  put<uint16_t>(p, h.version);
  put<uint16_t>(p, h.nsocks);
  put<uint16_t>(p, h.index);
  size_t job = std::min(h.job_id.size(), kMaxJobId);
  put<uint16_t>(p, static_cast<uint16_t>(job));
  put<int32_t>(p, h.src);
  put<int32_t>(p, h.dst);
  put<int32_t>(p, h.world_size);
  std::memcpy(p, h.job_id.data(), job);
  return kHelloFixed + job;
}

size_t decode_hello(const uint8_t* in, size_t n, Hello* h, std::string* error) {
  if (n < kHelloFixed) return kHelloFixed;
  const uint8_t* p = in;
  uint32_t magic = get<uint32_t>(p);
  if (magic != kHelloMagic) {
    *error = "not a tpcomm tcp connection (bad magic)";
    return 0;
  }
  h->version = get<uint16_t>(p);
  h->nsocks = get<uint16_t>(p);
  h->index = get<uint16_t>(p);
  uint16_t job = get<uint16_t>(p);
  h->src = get<int32_t>(p);
  h->dst = get<int32_t>(p);
  h->world_size = get<int32_t>(p);
  if (h->version != kWireVersion) {
    *error = "protocol version " + std::to_string(h->version) + ", this build speaks " +
             std::to_string(kWireVersion);
    return 0;
  }
  if (job > kMaxJobId || h->nsocks == 0 || h->nsocks > 64 || h->index >= h->nsocks) {
    *error = "malformed hello";
    return 0;
  }
  if (n < kHelloFixed + job) return kHelloFixed + job;
  h->job_id.assign(reinterpret_cast<const char*>(p), job);
  return kHelloFixed + job;
}

size_t encode_ack(const Ack& a, uint8_t* out) {
  uint8_t* p = out;
  put<uint32_t>(p, kHelloMagic);
  put<uint16_t>(p, kWireVersion);
  put<uint16_t>(p, a.status);
  size_t r = std::min(a.reason.size(), kMaxReason);
  put<uint16_t>(p, static_cast<uint16_t>(r));
  std::memcpy(p, a.reason.data(), r);
  return kAckFixed + r;
}

size_t decode_ack(const uint8_t* in, size_t n, Ack* a, std::string* error) {
  if (n < kAckFixed) return kAckFixed;
  const uint8_t* p = in;
  if (get<uint32_t>(p) != kHelloMagic || get<uint16_t>(p) != kWireVersion) {
    *error = "malformed handshake answer (not a tpcomm peer of this version)";
    return 0;
  }
  a->status = get<uint16_t>(p);
  uint16_t r = get<uint16_t>(p);
  if (r > kMaxReason) {
    *error = "malformed handshake answer";
    return 0;
  }
  if (n < kAckFixed + r) return kAckFixed + r;
  a->reason.assign(reinterpret_cast<const char*>(p), r);
  return kAckFixed + r;
}

void encode_frame(const Frame& f, uint8_t* out) {
  uint8_t* p = out;
  put<uint8_t>(p, static_cast<uint8_t>(f.kind));
  put<uint8_t>(p, 0xA5);
  put<uint16_t>(p, 0);
  put<uint32_t>(p, f.imm);
  put<uint64_t>(p, f.len);
  put<uint64_t>(p, f.region);
  put<uint64_t>(p, f.offset);
  put<uint64_t>(p, f.total);
  put<uint64_t>(p, f.put_id);
}

std::optional<Frame> decode_frame(const uint8_t* in, size_t max_message, std::string* error) {
  const uint8_t* p = in;
  Frame f;
  uint8_t kind = get<uint8_t>(p);
  uint8_t check = get<uint8_t>(p);
  get<uint16_t>(p);
  f.imm = get<uint32_t>(p);
  f.len = get<uint64_t>(p);
  f.region = get<uint64_t>(p);
  f.offset = get<uint64_t>(p);
  f.total = get<uint64_t>(p);
  f.put_id = get<uint64_t>(p);
  if (check != 0xA5 || kind < 1 || kind > 4) {
    *error = "corrupt frame header (kind " + std::to_string(kind) + ")";
    return std::nullopt;
  }
  f.kind = static_cast<FrameKind>(kind);
  if (f.kind == FrameKind::Msg && f.len > max_message) {
    *error = "message of " + std::to_string(f.len) + " bytes exceeds the " +
             std::to_string(max_message) + "-byte limit";
    return std::nullopt;
  }
  if ((f.kind == FrameKind::Bye || f.kind == FrameKind::Switch) && f.len != 0) {
    *error = "control frame with a payload";
    return std::nullopt;
  }
  if (f.kind == FrameKind::Put && (f.len > f.total || f.offset + f.len < f.offset)) {
    *error = "put fragment with inconsistent lengths";
    return std::nullopt;
  }
  return f;
}

}  // namespace tpcomm::tcp
