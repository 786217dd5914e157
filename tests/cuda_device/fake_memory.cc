// The fake driver's memory: the device arena, allocations, copies, memsets and pointer
// attributes (see fake_cuda.h).
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "cuda_device/fake_cuda.h"
#include "cuda_device/fake_internal.h"

namespace fake {

namespace {
constexpr size_t kArenaSize = size_t{16} << 30;  // device addresses: reserved, never readable
}

bool in_arena(uintptr_t p) { return st().arena && p >= st().arena && p < st().arena + kArenaSize; }

uintptr_t reserve_addresses(size_t size, size_t align) {
  State& s = st();
  if (s.arena == 0) {
    void* a =
        mmap(nullptr, kArenaSize, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED) return 0;
    s.arena = reinterpret_cast<uintptr_t>(a);
    s.arena_next = round_up(s.arena, kGranularity);
  }
  if (s.reuse) {
    auto it = s.freed.find(size);
    if (it != s.freed.end() && it->second % align == 0) {
      uintptr_t b = it->second;
      s.freed.erase(it);
      return b;
    }
  }
  uintptr_t b = round_up(s.arena_next, align);
  if (b + size > s.arena + kArenaSize) return 0;
  s.arena_next = b + size;
  return b;
}

int make_memfd(size_t size, int dev, uint64_t nonce, char** alias) {
  char name[64];
  std::snprintf(name, sizeof name, "fakecuda-d%d-%llx", dev,
                static_cast<unsigned long long>(nonce));
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return -1;
  }
  void* a = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (a == MAP_FAILED) {
    close(fd);
    return -1;
  }
  *alias = static_cast<char*>(a);
  return fd;
}

Region* find(uintptr_t p, size_t n) {
  auto& r = st().regions;
  auto it = r.upper_bound(p);
  if (it == r.begin()) return nullptr;
  --it;
  Region& g = it->second;
  if (p < g.base || p >= g.base + g.size) return nullptr;
  if (n > g.base + g.size - p) return nullptr;
  return &g;
}

char* view(uintptr_t p, size_t n, int want_device) {
  std::lock_guard<std::mutex> lock(st().mu);
  Region* g = find(p, n);
  if (g == nullptr) {
    // Not a known range: host memory, unless it is (or was) a device address, or a known
    // range overrun.
    if (in_arena(p) || find(p, 1) != nullptr || want_device == 1) return nullptr;
    return reinterpret_cast<char*>(p);
  }
  const bool dev = g->kind == Kind::Device || g->kind == Kind::Managed;
  if ((want_device == 1 && !dev) || (want_device == 0 && g->kind == Kind::Device)) return nullptr;
  if (!g->accessible) return nullptr;
  return g->alias + (p - g->base);
}

}  // namespace fake

using namespace fake;

namespace {

uint64_t random_nonce() {
  static std::atomic<uint64_t> n{0};
  return (static_cast<uint64_t>(getpid()) << 32) ^ (++n * 0x9e3779b97f4a7c15ull) ^
         reinterpret_cast<uintptr_t>(&n);
}

// Runs `op` on `s` (copies and memsets); `sync`: the host waits for it, as the synchronous
// calls do (they are ordered after the legacy stream's work).
CUresult submit(Stream* s, std::function<void()> op, bool sync) {
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  s->push(std::move(op));
  if (sync) s->wait_idle();
  return CUDA_SUCCESS;
}

// want_dst/want_src: 1 device, 0 host, -1 either (cuMemcpy's unified addressing).
CUresult copy(uintptr_t dst, uintptr_t src, size_t n, int want_dst, int want_src, CUstream hs,
              bool sync) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  char* d = view(dst, n, want_dst);
  char* s = view(src, n, want_src);
  if (d == nullptr || s == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = resolve_stream(hs);
  return submit(
      stream, [d, s, n] { std::memmove(d, s, n); }, sync);
}

CUresult memset_n(uintptr_t dst, uint32_t value, size_t width, size_t count, CUstream hs,
                  bool sync) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (dst % width != 0) return CUDA_ERROR_INVALID_VALUE;
  if (count == 0) return CUDA_SUCCESS;
  char* d = view(dst, count * width, 1);
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return submit(
      resolve_stream(hs),
      [d, value, width, count] {
        for (size_t i = 0; i < count; ++i) std::memcpy(d + i * width, &value, width);
      },
      sync);
}

CUresult add_host_region(void* p, size_t size, Kind kind) {
  std::lock_guard<std::mutex> lock(st().mu);
  auto base = reinterpret_cast<uintptr_t>(p);
  auto it = st().regions.lower_bound(base);
  if ((it != st().regions.end() && it->first < base + size) ||
      (it != st().regions.begin() &&
       std::prev(it)->second.base + std::prev(it)->second.size > base))
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  Region g;
  g.base = base;
  g.size = size;
  g.kind = kind;
  g.device = current->device;
  g.ctx = current;
  g.id = st().next_id++;
  g.alias = static_cast<char*>(p);
  st().regions[base] = g;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemAlloc(CUdeviceptr* out, size_t size) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t mapped = round_up(size, kPage);
  Region g;
  g.nonce = random_nonce();
  g.memfd = make_memfd(mapped, current->device, g.nonce, &g.alias);
  if (g.memfd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(st().mu);
  g.base = reserve_addresses(mapped, kPage);
  if (g.base == 0) {
    munmap(g.alias, mapped);
    close(g.memfd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  g.size = size;
  g.map_size = mapped;
  g.kind = Kind::Device;
  g.device = current->device;
  g.ctx = current;
  g.id = st().next_id++;
  st().regions[g.base] = g;
  *out = g.base;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr p) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (p == 0) return CUDA_SUCCESS;
  sync_all_streams();  // as the driver's cuMemFree, it waits for the work that may use it
  std::lock_guard<std::mutex> lock(st().mu);
  auto it = st().regions.find(p);
  if (it != st().regions.end() && it->second.kind == Kind::Managed) {
    munmap(it->second.alias, round_up(it->second.size, kPage));
    st().regions.erase(it);
    return CUDA_SUCCESS;
  }
  if (it == st().regions.end() || it->second.kind != Kind::Device || it->second.vmm ||
      it->second.imported)
    return CUDA_ERROR_INVALID_VALUE;
  Region& g = it->second;
  munmap(g.alias, g.map_size);
  close(g.memfd);
  st().freed.emplace(g.map_size, g.base);
  st().regions.erase(it);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* out, size_t size, unsigned int flags) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = mmap(nullptr, round_up(size, kPage), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult r = add_host_region(p, size, Kind::Managed); r != CUDA_SUCCESS) return r;
  *out = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostAlloc(void** out, size_t size, unsigned int flags) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = mmap(nullptr, round_up(size, kPage), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult r = add_host_region(p, size, Kind::PinnedHost); r != CUDA_SUCCESS) return r;
  *out = p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFreeHost(void* p) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(st().mu);
    auto it = st().regions.find(reinterpret_cast<uintptr_t>(p));
    if (it == st().regions.end() || it->second.kind != Kind::PinnedHost)
      return CUDA_ERROR_INVALID_VALUE;
    size = it->second.size;
    st().regions.erase(it);
  }
  munmap(p, round_up(size, kPage));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostRegister(void* p, size_t size, unsigned int flags) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (p == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (in_arena(reinterpret_cast<uintptr_t>(p))) return CUDA_ERROR_INVALID_VALUE;
  return add_host_region(p, size, Kind::Registered);
}

CUresult CUDAAPI cuMemHostUnregister(void* p) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(st().mu);
  auto it = st().regions.find(reinterpret_cast<uintptr_t>(p));
  if (it == st().regions.end() || it->second.kind != Kind::Registered)
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  st().regions.erase(it);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t n) {
  return copy(dst, reinterpret_cast<uintptr_t>(src), n, 1, 0, nullptr, true);
}
CUresult CUDAAPI cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t n) {
  return copy(reinterpret_cast<uintptr_t>(dst), src, n, 0, 1, nullptr, true);
}
CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy(dst, src, n, 1, 1, nullptr, true);
}
CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return copy(dst, src, n, -1, -1, nullptr, true);
}
CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy(dst, src, n, -1, -1, s, false);
}
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return copy(dst, reinterpret_cast<uintptr_t>(src), n, 1, 0, s, false);
}
CUresult CUDAAPI cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy(reinterpret_cast<uintptr_t>(dst), src, n, 0, 1, s, false);
}
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy(dst, src, n, 1, 1, s, false);
}
CUresult CUDAAPI cuMemsetD8(CUdeviceptr dst, unsigned char v, size_t n) {
  return memset_n(dst, v, 1, n, nullptr, true);
}
CUresult CUDAAPI cuMemsetD32(CUdeviceptr dst, unsigned int v, size_t n) {
  return memset_n(dst, v, 4, n, nullptr, true);
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  return memset_n(dst, v, 1, n, s, false);
}
CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {
  return memset_n(dst, v, 4, n, s, false);
}

CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(st().mu);
  Region* g = find(p, 1);
  if (g == nullptr || g->kind == Kind::Registered || g->kind == Kind::PinnedHost)
    return CUDA_ERROR_NOT_FOUND;
  if (base) *base = g->base;
  if (size) *size = g->size;
  return CUDA_SUCCESS;
}

namespace {

// One attribute of a known region; CUDA_ERROR_INVALID_VALUE for one it does not have.
CUresult attribute(const Region& g, CUpointer_attribute a, void* out, uintptr_t p) {
  const bool host = g.kind == Kind::PinnedHost || g.kind == Kind::Registered;
  switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(out) = reinterpret_cast<CUcontext>(g.ctx);
      break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned int*>(out) = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(out) = p;
      break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (g.kind == Kind::Device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(out) = reinterpret_cast<void*>(p);
      break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      *static_cast<int*>(out) = 0;
      break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      *static_cast<unsigned long long*>(out) = g.id;
      break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<unsigned int*>(out) = g.kind == Kind::Managed;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(out) = g.device;
      break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      *static_cast<int*>(out) = g.kind == Kind::Device && !g.vmm && !g.imported;
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(out) = g.base;
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(out) = g.size;
      break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<int*>(out) = 1;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUresult CUDAAPI cuPointerGetAttribute(void* out, CUpointer_attribute a, CUdeviceptr p) {
  if (!st().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mu);
  Region* g = find(p, 1);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return attribute(*g, a, out, p);
}

CUresult CUDAAPI cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attrs, void** data,
                                        CUdeviceptr p) {
  if (!st().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (attrs == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mu);
  Region* g = find(p, 1);
  for (unsigned int i = 0; i < n; ++i) {
    if (data[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (g != nullptr && attribute(*g, attrs[i], data[i], p) == CUDA_SUCCESS) continue;
    // Unknown memory (or an attribute it lacks): the driver's "not a CUDA pointer" values.
    switch (attrs[i]) {
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *static_cast<int*>(data[i]) = -2;
        break;
      case CU_POINTER_ATTRIBUTE_CONTEXT:
        *static_cast<CUcontext*>(data[i]) = nullptr;
        break;
      case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        *static_cast<uint64_t*>(data[i]) = 0;
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *static_cast<size_t*>(data[i]) = 0;
        break;
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      case CU_POINTER_ATTRIBUTE_MAPPED:
      case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *static_cast<unsigned int*>(data[i]) = 0;
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
