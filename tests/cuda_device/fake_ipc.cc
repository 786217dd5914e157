// The fake driver's memory sharing: legacy IPC handles and virtual memory management with POSIX
// fd handles (see fake_cuda.h). Both share memfds: a peer process opens the exporter's fd
// through /proc/<pid>/fd, and checks by its name that it is still the same allocation.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "cuda_device/fake_cuda.h"
#include "cuda_device/fake_internal.h"

using namespace fake;

namespace {

constexpr uint32_t kIpcMagic = 0x4b465054;  // "TPFK"

// The contents of a CUipcMemHandle made by this fake.
struct IpcHandle {
  uint32_t magic;
  int32_t pid;
  int32_t fd;
  int32_t device;
  uint64_t size;      // bytes of the allocation
  uint64_t map_size;  // bytes of its memfd
  uint64_t nonce;
};
static_assert(sizeof(IpcHandle) <= sizeof(CUipcMemHandle));

// The memfd name the fake gives an allocation, as /proc shows it.
bool fd_names(const char* path, int dev, uint64_t nonce) {
  char link[256], want[64];
  ssize_t n = readlink(path, link, sizeof link - 1);
  if (n <= 0) return false;
  link[n] = 0;
  std::snprintf(want, sizeof want, "/memfd:fakecuda-d%d-%llx ", dev,
                static_cast<unsigned long long>(nonce));
  return std::strncmp(link, want, std::strlen(want)) == 0;
}

// Reads the device and nonce back from a memfd's name.
bool parse_fd_name(int fd, int* dev, uint64_t* nonce) {
  char path[64], link[256];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, link, sizeof link - 1);
  if (n <= 0) return false;
  link[n] = 0;
  unsigned long long x = 0;
  if (std::sscanf(link, "/memfd:fakecuda-d%d-%llx", dev, &x) != 2) return false;
  *nonce = x;
  return true;
}

Handle* handle_of(CUmemGenericAllocationHandle h) {
  auto* p = reinterpret_cast<Handle*>(h);
  return st().handles.count(p) ? p : nullptr;
}

void drop_handle(Handle* h) {
  if (--h->refs > 0) return;
  st().handles.erase(h);
  munmap(h->alias, h->size);
  close(h->memfd);
  delete h;
}

CUresult check_location(const CUmemLocation& loc) {
  if (loc.type != CU_MEM_LOCATION_TYPE_DEVICE || loc.id < 0 || loc.id >= st().ndevices)
    return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

// ---- legacy IPC ----

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* out, CUdeviceptr p) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mu);
  Region* g = find(p, 1);
  // cuda.h asks for the allocation's base pointer: an interior one is refused here, so that
  // callers send the offset beside the handle (the handle names the whole allocation).
  if (g == nullptr || g->base != p || g->kind != Kind::Device || g->vmm || g->imported)
    return CUDA_ERROR_INVALID_VALUE;
  IpcHandle h{kIpcMagic, getpid(), g->memfd, g->device, g->size, g->map_size, g->nonce};
  std::memset(out, 0, sizeof *out);
  std::memcpy(out->reserved, &h, sizeof h);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr* out, CUipcMemHandle handle, unsigned int flags) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
    return CUDA_ERROR_INVALID_VALUE;
  IpcHandle h;
  std::memcpy(&h, handle.reserved, sizeof h);
  if (h.magic != kIpcMagic || h.size == 0 || h.map_size < h.size) return CUDA_ERROR_INVALID_VALUE;
  if (h.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;  // only other processes open it
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", h.pid, h.fd);
  std::lock_guard<std::mutex> lock(st().mu);
  // Opened before by this context: one more reference, the same pointer (as the driver does);
  // by another context of this process: refused (one context per device per other process).
  if (auto it = st().opened.find(h.nonce); it != st().opened.end()) {
    if (it->second.ctx != current) return CUDA_ERROR_INVALID_CONTEXT;
    ++it->second.refs;
    *out = it->second.base;
    return CUDA_SUCCESS;
  }
  // The exporter freed it (or exited): its fd is gone or names another allocation.
  if (!fd_names(path, h.device, h.nonce)) return CUDA_ERROR_INVALID_HANDLE;
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;
  void* a = mmap(nullptr, h.map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (a == MAP_FAILED) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Region g;
  g.base = reserve_addresses(h.map_size, kPage);
  if (g.base == 0) {
    munmap(a, h.map_size);
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  g.size = h.size;
  g.map_size = h.map_size;
  g.kind = Kind::Device;
  g.device = h.device;
  g.ctx = current;
  g.id = st().next_id++;
  g.alias = static_cast<char*>(a);
  g.memfd = fd;
  g.nonce = h.nonce;
  g.imported = true;
  st().regions[g.base] = g;
  st().opened[h.nonce] = {g.base, current, 1};
  *out = g.base;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr p) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  sync_all_streams();
  std::lock_guard<std::mutex> lock(st().mu);
  auto it = st().regions.find(p);
  if (it == st().regions.end() || !it->second.imported) return CUDA_ERROR_INVALID_VALUE;
  Region& g = it->second;
  if (--st().opened[g.nonce].refs > 0) return CUDA_SUCCESS;  // still open elsewhere in here
  munmap(g.alias, g.map_size);
  close(g.memfd);
  st().opened.erase(g.nonce);
  st().regions.erase(it);
  return CUDA_SUCCESS;
}

// ---- virtual memory management ----

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* g, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
  if (!st().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (g == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_location(prop->location); r != CUDA_SUCCESS) return r;
  *g = kGranularity;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* out, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || prop == nullptr || flags != 0 || size == 0 || size % kGranularity != 0 ||
      prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_location(prop->location); r != CUDA_SUCCESS) return r;
  auto* h = new Handle;
  h->size = size;
  h->device = prop->location.id;
  h->exportable = (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
  static std::atomic<uint64_t> n{1};
  h->memfd = make_memfd(size, h->device, (static_cast<uint64_t>(getpid()) << 32) | n++, &h->alias);
  if (h->memfd < 0) {
    delete h;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard<std::mutex> lock(st().mu);
  st().handles.insert(h);
  *out = reinterpret_cast<CUmemGenericAllocationHandle>(h);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle hh) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(st().mu);
  Handle* h = handle_of(hh);
  if (h == nullptr) return CUDA_ERROR_INVALID_VALUE;
  drop_handle(h);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemExportToShareableHandle(void* out, CUmemGenericAllocationHandle hh,
                                              CUmemAllocationHandleType type,
                                              unsigned long long flags) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mu);
  Handle* h = handle_of(hh);
  if (h == nullptr || !h->exportable) return CUDA_ERROR_INVALID_VALUE;
  int fd = fcntl(h->memfd, F_DUPFD, 0);  // no close-on-exec: it is the caller's to pass on
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(out) = fd;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* out, void* os_handle,
                                                CUmemAllocationHandleType type) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_INVALID_VALUE;
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(os_handle));
  int dev = 0;
  uint64_t nonce = 0;
  struct stat sb {};
  if (fd < 0 || !parse_fd_name(fd, &dev, &nonce) || fstat(fd, &sb) != 0 || sb.st_size <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  auto* h = new Handle;
  h->size = static_cast<size_t>(sb.st_size);
  h->device = dev;
  h->exportable = true;
  h->memfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);  // the caller keeps (and closes) its own fd
  void* a = mmap(nullptr, h->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (h->memfd < 0 || a == MAP_FAILED) {
    if (h->memfd >= 0) close(h->memfd);
    delete h;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  h->alias = static_cast<char*>(a);
  std::lock_guard<std::mutex> lock(st().mu);
  st().handles.insert(h);
  *out = reinterpret_cast<CUmemGenericAllocationHandle>(h);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* out, size_t size, size_t align, CUdeviceptr addr,
                                     unsigned long long flags) {
  if (!st().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (out == nullptr || size == 0 || size % kGranularity != 0 || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mu);
  uintptr_t b = reserve_addresses(size, align > kGranularity ? align : kGranularity);
  if (b == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  st().reservations[b] = size;
  *out = b;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr p, size_t size) {
  if (!st().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard<std::mutex> lock(st().mu);
  auto it = st().reservations.find(p);
  if (it == st().reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  auto r = st().regions.lower_bound(p);
  if (r != st().regions.end() && r->first < p + size) return CUDA_ERROR_INVALID_VALUE;  // mapped
  st().reservations.erase(it);
  st().freed.emplace(size, p);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr p, size_t size, size_t offset,
                          CUmemGenericAllocationHandle hh, unsigned long long flags) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(st().mu);
  Handle* h = handle_of(hh);
  if (h == nullptr || flags != 0 || size == 0 || size % kGranularity != 0 ||
      offset % kGranularity != 0 || offset + size > h->size)
    return CUDA_ERROR_INVALID_VALUE;
  auto res = st().reservations.upper_bound(p);
  if (res == st().reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --res;
  if (p < res->first || p + size > res->first + res->second) return CUDA_ERROR_INVALID_VALUE;
  auto r = st().regions.lower_bound(p);
  if ((r != st().regions.end() && r->first < p + size) ||
      (r != st().regions.begin() && std::prev(r)->second.base + std::prev(r)->second.size > p))
    return CUDA_ERROR_ALREADY_MAPPED;
  Region g;
  g.base = p;
  g.size = size;
  g.map_size = size;
  g.kind = Kind::Device;
  g.device = h->device;
  g.ctx = current;
  g.id = st().next_id++;
  g.alias = h->alias + offset;
  g.vmm = true;
  g.accessible = false;
  g.handle = hh;
  ++h->refs;
  st().regions[p] = g;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc* desc,
                                size_t count) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i)
    if (CUresult r = check_location(desc[i].location); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(st().mu);
  // Every byte of [p, p + size) must be mapped.
  uintptr_t at = p;
  std::vector<Region*> covered;
  while (at < p + size) {
    Region* g = find(at, 1);
    if (g == nullptr || !g->vmm) return CUDA_ERROR_INVALID_VALUE;
    covered.push_back(g);
    at = g->base + g->size;
  }
  const bool rw = desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (Region* g : covered) g->accessible = rw;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr p, size_t size) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  sync_all_streams();
  std::lock_guard<std::mutex> lock(st().mu);
  auto it = st().regions.find(p);
  if (it == st().regions.end() || !it->second.vmm || it->second.size != size)
    return CUDA_ERROR_INVALID_VALUE;
  Handle* h = handle_of(it->second.handle);
  st().regions.erase(it);
  if (h) drop_handle(h);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* out, void* addr) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mu);
  Region* g = find(reinterpret_cast<uintptr_t>(addr), 1);
  if (g == nullptr || !g->vmm) return CUDA_ERROR_INVALID_VALUE;
  Handle* h = handle_of(g->handle);
  if (h == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ++h->refs;
  *out = g->handle;
  return CUDA_SUCCESS;
}

}  // extern "C"
