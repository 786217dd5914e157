// The tcp transport's stream formats: the connection handshake (hello, ack) and the frames
// that follow (a message, a put fragment, a goodbye). Decoders validate everything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace tpcomm::tcp {

inline constexpr uint32_t kHelloMagic = 0x54504354;  // "TPCT"
inline constexpr uint16_t kWireVersion = 2;
inline constexpr size_t kMaxJobId = 255;

/// First bytes on every connection, from the connecting side.
struct Hello {
  uint16_t version = kWireVersion;
  uint16_t nsocks = 1;
  uint16_t index = 0;  ///< which of the nsocks this socket is
  int32_t src = -1;    ///< connecting rank
  int32_t dst = -1;    ///< rank it wants to reach
  int32_t world_size = 0;
  std::string job_id;
};
inline constexpr size_t kHelloFixed = 24;  // then job_id bytes

/// The accepting side's answer: status 0 accepts; else `reason` says why not.
struct Ack {
  uint16_t status = 0;
  std::string reason;
};
inline constexpr size_t kAckFixed = 10;  // then reason bytes
inline constexpr size_t kMaxReason = 512;

size_t encode_hello(const Hello& h, uint8_t* out);  // out holds kHelloFixed + kMaxJobId
/// Returns the needed total size when `n` bytes are not enough yet (0 when malformed, with
/// `error` set), else decodes into `h` and returns the bytes used.
size_t decode_hello(const uint8_t* p, size_t n, Hello* h, std::string* error);
size_t encode_ack(const Ack& a, uint8_t* out);  // out holds kAckFixed + kMaxReason
size_t decode_ack(const uint8_t* p, size_t n, Ack* a, std::string* error);

/// Ack status of the shared-secret challenge (reason ends with "[challenge <32 hex>]", the
/// acceptor's nonce). The connector answers with kAuthResponseSize bytes: "TPAR", its nonce
/// (16), HMAC proof (32); the final ack (status 0) carries "[proof <64 hex>]".
inline constexpr uint16_t kAckChallenge = 2;
/// Ack status that accepts the connection and says that the acceptor, which connected to the
/// connector too, moves its messages onto this socket: they follow a Switch frame on the
/// acceptor's own first socket, and the connector holds this socket's frames until it has read
/// that Switch (docs/transport.md, "tcp: one socket for the messages of a pair").
inline constexpr uint16_t kAckShared = 3;
inline constexpr size_t kAuthResponseSize = 4 + 16 + 32;

enum class FrameKind : uint8_t { Msg = 1, Put = 2, Bye = 3, Switch = 4 };

/// Header of every frame after the handshake (48 bytes). Msg: `len` payload bytes follow.
/// Put: `len` bytes for region `region` at `offset`, part of put `put_id` of `total` bytes
/// that notifies `imm` when all of it has arrived. Switch: the sender's later messages come on
/// the socket the receiver connected (kAckShared).
struct Frame {
  FrameKind kind = FrameKind::Msg;
  uint32_t imm = 0;
  uint64_t len = 0;
  uint64_t region = 0;
  uint64_t offset = 0;
  uint64_t total = 0;
  uint64_t put_id = 0;
};
inline constexpr size_t kFrameSize = 48;

void encode_frame(const Frame& f, uint8_t* out);
/// Validates kind and, for messages, len <= max_message; nullopt with `error` otherwise.
std::optional<Frame> decode_frame(const uint8_t* p, size_t max_message, std::string* error);

}  // namespace tpcomm::tcp
