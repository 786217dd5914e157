// Helpers shared by the ibverbs transport's files (ibv_transport.cc, ibv_connect.cc): wire
// constants, little-endian packing, errno text, work-request id kinds.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace tpcomm::ibv {

constexpr uint32_t kAddrMagic = 0x54504942;  // "TPIB"
constexpr uint32_t kConnMagic = 0x54504943;  // "TPIC"
constexpr uint16_t kVersion = 2;             // 2: rails (address: rail count; connection: per rail)
constexpr size_t kAddrSize = 40;

inline uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

template <class T>
void put_le(std::vector<uint8_t>& b, T v) {
  uint8_t tmp[sizeof(T)];
  std::memcpy(tmp, &v, sizeof(T));
  b.insert(b.end(), tmp, tmp + sizeof(T));
}

template <class T>
bool get_le(std::span<const uint8_t> b, size_t& off, T* v) {
  if (off + sizeof(T) > b.size()) return false;
  std::memcpy(v, b.data() + off, sizeof(T));
  off += sizeof(T);
  return true;
}

inline std::string errno_text(int e) {
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

// wr_id: kind in the top 2 bits.
constexpr uint64_t kSendKind = 1, kPutKind = 2, kRecvKind = 3;
inline uint64_t kind_of(uint64_t id) { return id >> 62; }

}  // namespace tpcomm::ibv
