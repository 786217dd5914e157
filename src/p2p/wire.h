// The point-to-point protocol's message formats (one place, above every transport). Every
// message starts with a Header; RTS and CTS add a fixed trailer. Everything read off a link
// is validated here before the engine uses it (DESIGN.md principle 5).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "tpcomm/transport/memory.hpp"
#include "tpcomm/types.hpp"

namespace tpcomm::p2p {

/// Message kinds. Eager: header + the whole payload. Rts: "I have `bytes` for you" (large
/// message). Cts: the receiver's answer to an RTS: its buffer's key, or a refusal. Credit:
/// returns flow-control credits only. RtsData: an RTS whose data the sender has already sent
/// as tagged data under `data_id` (transports with Capabilities::tagged_data): the receiver
/// answers only a refusal (a Cts), and otherwise receives the data with recv_tagged.
enum class MsgType : uint8_t { Eager = 1, Rts = 2, Cts = 3, Credit = 4, RtsData = 5 };

inline constexpr uint8_t kWireMagic = 0xA7;
inline constexpr uint8_t kWireVersion = 2;  // 2: RtsData (tagged data without a CTS)

/// Common header (40 bytes on the wire, little-endian).
struct Header {
  MsgType type = MsgType::Eager;
  DType dtype = DType::UInt8;
  uint32_t credits = 0;  ///< credits returned to the receiver of this message
  uint64_t group = 0;    ///< group id (hash of the group's store prefix)
  int32_t src = -1;      ///< sender's global rank
  int32_t tag = 0;
  uint64_t seq = 0;    ///< per (group, src, dst, tag) sequence number
  uint64_t bytes = 0;  ///< size of the user message
};
inline constexpr size_t kHeaderSize = 40;

/// RTS trailer: the sender's operation id, echoed in the CTS; RtsData adds the tagged data's
/// id.
struct Rts {
  uint32_t send_id = 0;
  uint32_t data_id = 0;  ///< RtsData only
};
inline constexpr size_t kRtsSize = kHeaderSize + 4;
inline constexpr size_t kRtsDataSize = kHeaderSize + 8;

/// CTS trailer. status 0: put `bytes` into `key` in chunks of `chunk` bytes, each chunk's
/// notification carrying `recv_id`. Otherwise the receiver refused; `reason` says why.
struct Cts {
  uint32_t send_id = 0;
  uint32_t recv_id = 0;
  uint32_t status = 0;
  uint64_t chunk = 0;
  transport::RemoteKey key;
  std::string reason;
};
/// Largest encoded CTS (header, fixed fields, key, reason).
inline constexpr size_t kMaxReason = 256;
inline constexpr size_t kCtsFixed = kHeaderSize + 4 + 4 + 4 + 8 + 8 + 8 + 2 + 2;
inline constexpr size_t kMaxCtsSize = kCtsFixed + transport::RemoteKey::kMaxBlob + kMaxReason;

/// Encoders write into `out` (which must hold the size) and return the bytes written;
/// encode_rts and encode_cts set the header's type.
size_t encode_header(const Header& h, uint8_t* out);
size_t encode_rts(const Header& h, const Rts& r, uint8_t* out);
size_t encode_rts_data(const Header& h, const Rts& r, uint8_t* out);
size_t encode_cts(const Header& h, const Cts& c, uint8_t* out);

/// A decoded message: the header, its trailer, and the eager payload (a view into the
/// input).
struct Decoded {
  Header header;
  Rts rts;
  Cts cts;
  std::span<const uint8_t> payload;
};

/// The latency path's decode: true when `msg` is a well-formed eager message from `peer`
/// (the checks decode() makes for one), with its header in `*h`. False says nothing more:
/// decode() then tells what the message is or what is wrong with it.
bool parse_eager(std::span<const uint8_t> msg, int peer, Header* h);

/// Decodes and validates one message from `peer`; nullopt with `*error` set when it is
/// malformed (bad magic or version, unknown type or dtype, lengths that do not add up, a
/// source rank that is not `peer`, a blob larger than a RemoteKey holds).
std::optional<Decoded> decode(std::span<const uint8_t> msg, int peer, std::string* error);

}  // namespace tpcomm::p2p
