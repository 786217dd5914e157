// Transport::allocate_memory's default: private anonymous pages, registered with the transport
// that made them, unmapped after the registration is gone.
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "tpcomm/error.hpp"
#include "tpcomm/transport/transport.hpp"

namespace tpcomm::transport {
namespace {

/// Owns the pages and the registration over them (destroyed first).
class OwnedRegion : public MemoryRegion {
 public:
  OwnedRegion(void* addr, size_t length, Device device, std::unique_ptr<MemoryRegion> reg)
      : MemoryRegion(addr, length, device), reg_(std::move(reg)) {}
  ~OwnedRegion() override {
    reg_.reset();
    if (length() > 0) ::munmap(addr(), length());
  }
  RemoteKey remote_key() const override { return reg_->remote_key(); }

 private:
  std::unique_ptr<MemoryRegion> reg_;
};

}  // namespace

std::unique_ptr<MemoryRegion> Transport::allocate_memory(size_t length, Device device) {
  if (device.type != DeviceType::CPU)
    throw NotSupportedError(std::string(name()) + " transport: allocating " + device.str() +
                            " memory is not supported (host memory only)");
  void* p = nullptr;
  if (length > 0) {
    p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw TransportError(std::string(name()) + " transport: allocating " +
                           std::to_string(length) + " bytes failed: " + std::strerror(errno));
  }
  try {
    auto reg = register_memory(p, length, device);
    return std::make_unique<OwnedRegion>(p, length, device, std::move(reg));
  } catch (...) {
    if (length > 0) ::munmap(p, length);
    throw;
  }
}

}  // namespace tpcomm::transport
