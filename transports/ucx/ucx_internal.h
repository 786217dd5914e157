// Internals shared by the ucx transport's files: tag layout, limits, and the request record
// that UCX callbacks fill.
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tpcomm::ucx {

class UcxTransport;

// UCX_TLS lists (ucx_tls.cc). True when UCX_TLS, as UCX printed its configuration
// (`config_text`), may name an RDMA transport (anything but tcp and the shared-memory ones;
// "all" and "^..." lists may); the list itself goes to *tls_out.
bool tls_may_be_native(const std::string& config_text, std::string* tls_out);
// True when the list names socket transports only (tcp, sockcm, self): every
// ucp_worker_progress is then a system call (Capabilities::progress_is_syscall).
bool tls_is_sockets_only(const std::string& tls);

// Tags: bit 63 set = a message into the pre-posted pool (kind in bits 62..60); bit 63 clear
// and bit 62 clear = the data of a tag-mode put (put id in bits 59..32); bit 63 clear and bit
// 62 set = tagged data of the protocol (Endpoint::send_tagged, id in bits 61..32). Bits 31..0:
// the sender's rank.
inline constexpr uint64_t kPoolBit = 1ull << 63;
inline constexpr uint64_t kTaggedBit = 1ull << 62;
inline constexpr uint64_t kKindMsg = 0, kKindPutHdr = 1, kKindNotify = 2;
inline constexpr uint32_t kAddrMagic = 0x58555054;  // "TPUX"
inline constexpr uint16_t kAddrVersion = 1;
// Address header: magic u32, version u16, flags u16, rank i32, pid u32, job hash u64, host
// hash u64, pid namespace inode u64; then the UCP worker address. Flags (0 from a build
// before them): kAddrTakesTaggedAm = this rank receives tagged data with its message as an
// active message (kAmTaggedId).
inline constexpr uint16_t kAddrTakesTaggedAm = 1;
inline constexpr size_t kAddrHeader = 40;
inline constexpr size_t kPutHdrSize = 24;
// The active message that carries a protocol message with tagged data
// (Endpoint::send_tagged_with_message): its header is the sender's rank (i32) and the data id
// (u32), then the message; its data is the tagged data, always by UCX's rendezvous.
inline constexpr unsigned kAmTaggedId = 1;
inline constexpr size_t kAmTaggedHdr = 8;
inline constexpr size_t kMaxBuffered = 256u << 20;  // bytes copied for pending sends
// Closing endpoints at shutdown: the flush is waited for while the peer lives, up to
// TPCOMM_UCX_CLOSE_TIMEOUT; a warning names the wait after kCloseWarn (or half the timeout).
inline constexpr std::chrono::milliseconds kCloseWarn{3000};

inline uint64_t pool_tag(uint64_t kind, int rank) {
  return kPoolBit | (kind << 60) | static_cast<uint32_t>(rank);
}
inline uint64_t data_tag(uint32_t id, int rank) {
  return (static_cast<uint64_t>(id & 0x0fffffffu) << 32) | static_cast<uint32_t>(rank);
}

inline uint64_t tagged_tag(uint64_t id, int rank) {
  return kTaggedBit | ((id & 0x3fffffffu) << 32) | static_cast<uint32_t>(rank);
}

/// Our side of one UCX request; UCX callbacks only mark it done and queue it, progress()
/// reports it.
struct Req {
  // TaggedRts: an active message with a protocol message and tagged data arrived (addr: UCX's
  // data descriptor, or 0 with the data copied into `copy`; cookie: the data id; expect: the
  // data's length; buf: the message).
  enum Kind : uint8_t {
    Pool, Msg, PutHdr, PutData, Flush, Notify, DataRecv, Discard, TaggedRts
  } kind = Msg;
  UcxTransport* t = nullptr;
  void* ucx = nullptr;  // the UCX request, freed when reported
  ucs_status_t status = UCS_OK;
  ucp_tag_recv_info_t info{};
  int peer = -1;
  int index = -1;  // Pool: buffer index
  bool has_cookie = false;
  uint64_t cookie = 0;
  uint32_t imm = 0;
  uintptr_t addr = 0;  // DataRecv: destination
  size_t expect = 0;   // DataRecv: length
  std::vector<uint8_t> buf;
  std::vector<uint8_t> copy;  // TaggedRts: data UCX delivered eagerly and did not keep
};

/// UCX completion callbacks (user_data = the Req): mark it and queue it for progress().
void send_cb(void* request, ucs_status_t status, void* user);
void recv_cb(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user);
void am_data_cb(void* request, ucs_status_t status, size_t length, void* user);
/// The receive handler of kAmTaggedId (arg = the UcxTransport).
ucs_status_t am_tagged_cb(void* arg, const void* header, size_t header_length, void* data,
                          size_t length, const ucp_am_recv_param_t* param);

}  // namespace tpcomm::ucx
