// What the shm transport says outside the rings: the address blob published through the
// store, and the control messages on the per-direction unix sockets (HELLO with the ring
// segment's descriptor, ACK, REFUSE, BYE, and one-byte doorbells). Everything decoded here
// comes from another process and is validated before use (DESIGN.md principle 5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tpcomm::transport::shm {

inline constexpr uint32_t kAddressMagic = 0x41534854;  // "THSA"
inline constexpr uint32_t kControlMagic = 0x43534854;  // "THSC"
inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kMaxSocketName = 100;  // abstract unix name, without the leading NUL
inline constexpr size_t kMaxJobId = 1024;
inline constexpr size_t kMaxReasonText = 1024;
/// A control message is at most this long; a one-byte message is a doorbell.
inline constexpr size_t kMaxControl = 4096;
inline constexpr uint8_t kDoorbell = 0xDB;

/// How to reach a process's shm transport: its listening socket, its identity and the probe
/// word a peer reads to test cross-memory access (process_vm_readv) toward it.
struct PeerInfo {
  uint32_t pid = 0;
  uint32_t uid = 0;
  uint64_t instance = 0;  ///< random per transport instance
  uint64_t probe_addr = 0;
  uint64_t probe_cookie = 0;
  std::string socket_name;
};

/// address() blob.
std::vector<uint8_t> encode_address(const PeerInfo& info);
/// Throws TransportError naming `what` when the blob is malformed.
PeerInfo decode_address(std::span<const uint8_t> blob, const std::string& what);

enum class ControlType : uint16_t { Hello = 1, Ack = 2, Refuse = 3, Bye = 4 };

/// A control message. Hello fills every field; Ack uses the ranks; Refuse the ranks and the
/// reason; Bye none.
struct Control {
  ControlType type = ControlType::Hello;
  uint16_t version = kWireVersion;
  int32_t src_rank = -1;
  int32_t dst_rank = -1;
  int32_t world_size = 0;
  uint64_t segment_bytes = 0;
  uint64_t ring_bytes = 0;
  PeerInfo from;
  std::string job_id;
  std::string reason;
};

std::vector<uint8_t> encode_control(const Control& c);
/// Decodes one message. Returns "" or what is wrong with it. A message of another version
/// decodes its header only (type, version) and reports the mismatch.
std::string decode_control(std::span<const uint8_t> bytes, Control* out);

/// Sends one message, with `pass_fd` attached (SCM_RIGHTS) when >= 0. Never blocks and never
/// raises SIGPIPE. Returns 0, or the errno (EAGAIN: socket full, EPIPE/ECONNRESET: peer gone).
int send_message(int sock, std::span<const uint8_t> bytes, int pass_fd = -1);

/// Receives one message into `buf`; a descriptor that came with it lands in *fd (else -1).
/// Returns the length, 0 at end of stream, or -errno (-EAGAIN: nothing there).
ssize_t recv_message(int sock, std::span<uint8_t> buf, int* fd);

}  // namespace tpcomm::transport::shm
