// Memory registration of the link layer: a registered region and the small key that lets a
// peer put into it (ibverbs lkey/rkey, UCX memh/packed rkey, an shm segment id). See
// docs/transport.md for how each transport fills the key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "tpcomm/types.hpp"

namespace tpcomm::transport {

/// What a peer needs to reach a registered region: its base address and length in the
/// owner's address space (as ibv_mr addr/length) plus a transport-defined blob (ibverbs:
/// rkey; UCX: the ucp_rkey_pack output; shm: segment id and pid). Trivially copyable and of
/// fixed capacity, so the protocol carries it inside a message with no allocation.
struct RemoteKey {
  static constexpr size_t kMaxBlob = 232;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint16_t blob_size = 0;
  uint8_t blob_data[kMaxBlob] = {};

  std::span<const uint8_t> blob() const { return {blob_data, blob_size}; }
  /// Stores `b` as the blob; false when it exceeds kMaxBlob.
  bool set_blob(std::span<const uint8_t> b) {
    if (b.size() > kMaxBlob) return false;
    std::memcpy(blob_data, b.data(), b.size());
    blob_size = static_cast<uint16_t>(b.size());
    return true;
  }
};

/// A registered range of local memory. Made by Transport::register_memory; deregistered when
/// destroyed. The owner keeps the memory alive, and no put may target or read it after
/// destruction. Not copyable: registration is a resource (pinned pages, a NIC table entry).
class MemoryRegion {
 public:
  MemoryRegion(void* addr, size_t length, Device device)
      : addr_(addr), length_(length), device_(device) {}
  virtual ~MemoryRegion() = default;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  void* addr() const { return addr_; }
  size_t length() const { return length_; }
  Device device() const { return device_; }
  /// The key to send to a peer so that it can put into this region.
  virtual RemoteKey remote_key() const = 0;

 private:
  void* addr_;
  size_t length_;
  Device device_;
};

}  // namespace tpcomm::transport
