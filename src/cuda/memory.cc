// Memory-kind queries with a cache keyed by allocation, and the check of CUDA tensors: see
// cuda.h.
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "cuda/cuda.h"
#include "tpcomm/error.hpp"
#include "tpcomm/version.hpp"

#if TPCOMM_HAVE_CUDA
#include "cuda/driver.h"
#endif

namespace tpcomm::cuda {

namespace {

std::string hex(uintptr_t p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%zx", static_cast<size_t>(p));
  return buf;
}

std::atomic<uint64_t> g_full_queries{0};

#if TPCOMM_HAVE_CUDA
// Allocations seen so far, by start address. An entry is trusted only while the driver still
// reports its buffer id for the pointer: freed and reallocated memory at the same address gets a
// new id, and the stale entry is replaced.
struct Cache {
  std::shared_mutex mu;
  std::map<uintptr_t, MemoryInfo> by_base;
};

Cache& cache() {
  static Cache c;
  return c;
}

MemoryInfo full_query(const Driver& d, const void* p) {
  g_full_queries.fetch_add(1, std::memory_order_relaxed);
  unsigned int type = 0;
  int ordinal = -1;
  unsigned long long id = 0;
  CUdeviceptr start = 0;
  size_t size = 0;
  unsigned int managed = 0;
  CUpointer_attribute attrs[] = {
      CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
      CU_POINTER_ATTRIBUTE_BUFFER_ID,   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
      CU_POINTER_ATTRIBUTE_RANGE_SIZE,  CU_POINTER_ATTRIBUTE_IS_MANAGED};
  void* values[] = {&type, &ordinal, &id, &start, &size, &managed};
  check(d,
        d.PointerGetAttributes(6, attrs, values,
                               static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p))),
        "cuPointerGetAttributes");
  MemoryInfo m;
  if (type == 0) return m;  // memory the driver does not know: pageable host memory
  m.kind = managed ? MemoryKind::Managed
                   : (type == CU_MEMORYTYPE_HOST ? MemoryKind::PinnedHost : MemoryKind::Device);
  m.device = ordinal;
  m.base = static_cast<uintptr_t>(start);
  m.size = size;
  m.buffer_id = id;
  return m;
}
#endif

}  // namespace

const char* memory_kind_name(MemoryKind k) {
  switch (k) {
    case MemoryKind::Host:
      return "host";
    case MemoryKind::PinnedHost:
      return "pinned host";
    case MemoryKind::Device:
      return "device";
    case MemoryKind::Managed:
      return "managed";
  }
  return "unknown";
}

std::string MemoryInfo::str() const {
  std::string s = std::string(memory_kind_name(kind)) + " memory";
  if (kind == MemoryKind::Device || kind == MemoryKind::Managed)
    s += " of cuda:" + std::to_string(device);
  if (kind != MemoryKind::Host) s += " (allocation " + hex(base) + "+" + std::to_string(size) + ")";
  return s;
}

uint64_t full_queries() { return g_full_queries.load(std::memory_order_relaxed); }

#if !TPCOMM_HAVE_CUDA

MemoryInfo query(const void*) {
  throw NotSupportedError("cuda: cannot query memory kinds: " + driver_status().reason);
}

void clear_memory_cache() {}

#else

MemoryInfo query(const void* p) {
  const Driver& d = driver();
  const auto addr = reinterpret_cast<uintptr_t>(p);
  Cache& c = cache();
  {
    std::shared_lock<std::shared_mutex> lock(c.mu);
    auto it = c.by_base.upper_bound(addr);
    if (it != c.by_base.begin()) {
      --it;
      const MemoryInfo& m = it->second;
      unsigned long long id = 0;
      if (addr < m.base + m.size &&
          d.PointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                static_cast<CUdeviceptr>(addr)) == CUDA_SUCCESS &&
          id == m.buffer_id)
        return m;
    }
  }
  MemoryInfo m = full_query(d, p);
  if (m.kind != MemoryKind::Host) {
    std::unique_lock<std::shared_mutex> lock(c.mu);
    // Drop entries the new allocation overlaps (freed memory whose range was reused).
    auto it = c.by_base.lower_bound(m.base);
    if (it != c.by_base.begin() && std::prev(it)->second.base + std::prev(it)->second.size > m.base)
      --it;
    while (it != c.by_base.end() && it->first < m.base + m.size) it = c.by_base.erase(it);
    c.by_base[m.base] = m;
  }
  return m;
}

void clear_memory_cache() {
  std::unique_lock<std::shared_mutex> lock(cache().mu);
  cache().by_base.clear();
}

#endif

void check_device_tensor(const Tensor& t, const std::string& where) {
  const std::string label = where + " is labelled " + t.device.str();
  if (!built())
    throw NotSupportedError(label + " but this build has no CUDA support (" + build_reason() + ")");
  const DriverStatus& st = driver_status();
  if (!st.usable) throw NotSupportedError(label + " but CUDA is unusable here: " + st.reason);
  if (t.device.index < 0 || t.device.index >= st.devices) {
    throw InvalidArgument(label + " but this process sees " + std::to_string(st.devices) +
                          " CUDA device(s) (cuda:0..cuda:" + std::to_string(st.devices - 1) + ")");
  }
  if (t.numel == 0) return;
  const MemoryInfo m = query(t.data);
  const auto addr = reinterpret_cast<uintptr_t>(t.data);
  if (m.kind != MemoryKind::Device || m.device != t.device.index) {
    throw InvalidArgument(label + " but its data " + hex(addr) + " is " + m.str() +
                          "; pass device memory of " + t.device.str() + " or label it so");
  }
  if (addr + t.nbytes() > m.base + m.size) {
    throw InvalidArgument(label + ": its " + std::to_string(t.nbytes()) + " bytes at " + hex(addr) +
                          " run past the end of its " + m.str());
  }
}

void refuse_device_tensor(const Tensor& t, const std::string& where) {
  check_device_tensor(t, where);
  throw NotSupportedError(where + " is a CUDA tensor (" + t.str() +
                          "): this path moves host memory only; ProcessGroup's operations stage "
                          "CUDA tensors through pinned host memory (docs/gpu.md)");
}

}  // namespace tpcomm::cuda
