// Registered memory of the shm transport. Registration pins nothing: a peer writes into the
// region with process_vm_writev (the key names the owner's instance and the region), or
// copies it through the ring, where the owner looks the region up in its table and checks
// the range before writing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>

#include "tpcomm/transport/memory.hpp"

namespace tpcomm::transport::shm {

inline constexpr uint32_t kKeyMagic = 0x4b534854;  // "THSK"

/// The shm part of a RemoteKey (its blob).
struct KeyBlob {
  uint64_t instance = 0;  ///< owner transport instance
  uint64_t region = 0;    ///< region id in the owner's table
};

/// Encodes / decodes the blob; decode returns nullopt for a blob that is not ours.
void encode_key(const KeyBlob& k, RemoteKey* key);
std::optional<KeyBlob> decode_key(const RemoteKey& key);

/// The owner's regions by id, shared between the transport and its regions (a region may be
/// destroyed after its transport).
class RegionTable {
 public:
  struct Range {
    uint8_t* addr;
    size_t length;
  };
  uint64_t add(void* addr, size_t length);
  void remove(uint64_t id);
  std::optional<Range> find(uint64_t id) const;

 private:
  mutable std::mutex mu_;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, Range> regions_;
};

class ShmMemoryRegion final : public MemoryRegion {
 public:
  ShmMemoryRegion(void* addr, size_t length, Device device, uint64_t instance,
                  std::shared_ptr<RegionTable> table);
  ~ShmMemoryRegion() override;
  RemoteKey remote_key() const override;
  uint64_t id() const { return id_; }

 private:
  uint64_t instance_;
  uint64_t id_;
  std::shared_ptr<RegionTable> table_;
};

}  // namespace tpcomm::transport::shm
