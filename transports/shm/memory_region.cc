// shm memory registration: a table of ranges and a small key.
#include "transports/shm/memory_region.h"

#include <cstring>

namespace tpcomm::transport::shm {

namespace {
constexpr uint16_t kKeyVersion = 1;
constexpr size_t kKeyBytes = 4 + 2 + 2 + 8 + 8;
}  // namespace

void encode_key(const KeyBlob& k, RemoteKey* key) {
  uint8_t b[kKeyBytes];
  uint16_t flags = 0;
  std::memcpy(b, &kKeyMagic, 4);
  std::memcpy(b + 4, &kKeyVersion, 2);
  std::memcpy(b + 6, &flags, 2);
  std::memcpy(b + 8, &k.instance, 8);
  std::memcpy(b + 16, &k.region, 8);
  key->set_blob({b, kKeyBytes});
}

std::optional<KeyBlob> decode_key(const RemoteKey& key) {
  auto b = key.blob();
  if (b.size() != kKeyBytes) return std::nullopt;
  uint32_t magic;
  uint16_t version;
  std::memcpy(&magic, b.data(), 4);
  std::memcpy(&version, b.data() + 4, 2);
  if (magic != kKeyMagic || version != kKeyVersion) return std::nullopt;
  KeyBlob k;
  std::memcpy(&k.instance, b.data() + 8, 8);
  std::memcpy(&k.region, b.data() + 16, 8);
  return k;
}

uint64_t RegionTable::add(void* addr, size_t length) {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t id = next_++;
  regions_[id] = Range{static_cast<uint8_t*>(addr), length};
  return id;
}

void RegionTable::remove(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  regions_.erase(id);
}

std::optional<RegionTable::Range> RegionTable::find(uint64_t id) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = regions_.find(id);
  if (it == regions_.end()) return std::nullopt;
  return it->second;
}

ShmMemoryRegion::ShmMemoryRegion(void* addr, size_t length, Device device, uint64_t instance,
                                 std::shared_ptr<RegionTable> table)
    : MemoryRegion(addr, length, device),
      instance_(instance),
      id_(table->add(addr, length)),
      table_(std::move(table)) {}

ShmMemoryRegion::~ShmMemoryRegion() { table_->remove(id_); }

RemoteKey ShmMemoryRegion::remote_key() const {
  RemoteKey k;
  k.addr = reinterpret_cast<uint64_t>(addr());
  k.length = length();
  encode_key({instance_, id_}, &k);
  return k;
}

}  // namespace tpcomm::transport::shm
