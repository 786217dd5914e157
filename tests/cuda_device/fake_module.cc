// The fake driver's modules and kernel launches, and cuGetProcAddress (see fake_cuda.h).
#include <cstring>
#include <map>
#include <string>

#include "cuda_device/fake_cuda.h"
#include "cuda_device/fake_internal.h"
#include "cuda_device/fake_kernels.h"

using namespace fake;

namespace {

struct Module {
  Context* ctx = nullptr;
  std::string image;  // searched for kernel names where the image is not compressed
};

struct Function {
  Module* module = nullptr;
  std::string name;
  Prepare prepare = nullptr;
};

std::map<std::string, Prepare>& twins() {
  static auto* m = new std::map<std::string, Prepare>;
  return *m;
}

std::set<Module*>& modules() {
  static auto* m = new std::set<Module*>;
  return *m;
}

std::set<Function*>& functions() {
  static auto* m = new std::set<Function*>;
  return *m;
}

// The size of a supported image: a fatbin (nvcc -fatbin), an ELF cubin, or PTX text; 0 if it
// is none of them.
size_t image_size(const void* image) {
  const auto* b = static_cast<const unsigned char*>(image);
  uint32_t magic;
  std::memcpy(&magic, b, 4);
  if (magic == 0xBA55ED50u) {  // fatbin: magic, version, header size, payload size
    uint16_t header;
    uint64_t payload;
    std::memcpy(&header, b + 6, 2);
    std::memcpy(&payload, b + 8, 8);
    return header + payload;
  }
  if (std::memcmp(b,
                  "\x7f"
                  "ELF",
                  4) == 0) {
    uint64_t shoff;
    uint16_t shentsize, shnum;
    std::memcpy(&shoff, b + 0x28, 8);
    std::memcpy(&shentsize, b + 0x3a, 2);
    std::memcpy(&shnum, b + 0x3c, 2);
    return shoff + size_t{shentsize} * shnum;
  }
  const char* t = static_cast<const char*>(image);
  if (std::strncmp(t, "//", 2) == 0 || std::strncmp(t, ".version", 8) == 0) return std::strlen(t);
  return 0;
}

}  // namespace

namespace fake {
void register_kernel(const char* name, Prepare prepare) { twins()[name] = prepare; }
}  // namespace fake

extern "C" {

CUresult CUDAAPI cuModuleLoadData(CUmodule* out, const void* image) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const size_t n = image_size(image);
  if (n == 0) return CUDA_ERROR_INVALID_IMAGE;
  std::lock_guard<std::mutex> lock(st().mu);
  if (twins().empty()) register_twins();
  auto* m = new Module{current, std::string(static_cast<const char*>(image), n)};
  modules().insert(m);
  *out = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hm) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  sync_all_streams();
  std::lock_guard<std::mutex> lock(st().mu);
  auto* m = reinterpret_cast<Module*>(hm);
  if (!modules().erase(m)) return CUDA_ERROR_INVALID_HANDLE;
  for (auto it = functions().begin(); it != functions().end();) {
    if ((*it)->module == m) {
      delete *it;
      it = functions().erase(it);
    } else {
      ++it;
    }
  }
  delete m;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* out, CUmodule hm, const char* name) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mu);
  auto* m = reinterpret_cast<Module*>(hm);
  if (!modules().count(m)) return CUDA_ERROR_INVALID_HANDLE;
  auto t = twins().find(name);
  // The name must be in the image too: a kernel the image lacks is not found on a GPU either.
  if (t == twins().end() || m->image.find(name) == std::string::npos) return CUDA_ERROR_NOT_FOUND;
  auto* f = new Function{m, name, t->second};
  functions().insert(f);
  *out = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction hf, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int shared, CUstream hs, void** params, void** extra) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  Function f;
  {
    std::lock_guard<std::mutex> lock(st().mu);
    auto* p = reinterpret_cast<Function*>(hf);
    if (!functions().count(p)) return CUDA_ERROR_INVALID_HANDLE;
    f = *p;
    if (f.module->ctx != current) return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || gx > 0x7fffffffu ||
      gy > 65535 || gz > 65535 || extra != nullptr || params == nullptr || shared > 48 * 1024)
    return CUDA_ERROR_INVALID_VALUE;
  if (size_t{bx} * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = resolve_stream(hs);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const int dev = current->device;
  Translate translate = [dev](CUdeviceptr p, size_t bytes) -> void* {
    {
      std::lock_guard<std::mutex> lock(st().mu);
      Region* g = find(p, bytes == 0 ? 1 : bytes);
      if (g == nullptr || (g->kind == Kind::Device && g->device != dev) ||
          g->kind == Kind::PinnedHost || g->kind == Kind::Registered)
        return nullptr;
    }
    return view(p, bytes == 0 ? 1 : bytes, 1);
  };
  Launch l{{gx, gy, gz}, {bx, by, bz}, params};
  std::function<void()> run;
  if (CUresult r = f.prepare(l, translate, &run); r != CUDA_SUCCESS) return r;
  s->push(std::move(run));
  return CUDA_SUCCESS;
}

// Every entry point of this fake by its base name, for cuGetProcAddress.
// clang-format off
#define FAKE_FUNCS(X)                                                                            \
  X(Init) X(DriverGetVersion) X(GetErrorName) X(GetErrorString) X(DeviceGet) X(DeviceGetCount)   \
  X(DeviceGetName) X(DeviceGetAttribute) X(DevicePrimaryCtxRetain) X(DevicePrimaryCtxRelease)    \
  X(CtxSetCurrent) X(CtxGetCurrent) X(CtxGetDevice) X(CtxSynchronize) X(MemAlloc) X(MemFree)     \
  X(MemAllocManaged) X(MemHostAlloc) X(MemFreeHost) X(MemHostRegister) X(MemHostUnregister)      \
  X(MemcpyHtoD) X(MemcpyDtoH) X(MemcpyDtoD) X(Memcpy) X(MemcpyAsync) X(MemcpyHtoDAsync)          \
  X(MemcpyDtoHAsync) X(MemcpyDtoDAsync) X(MemsetD8) X(MemsetD32) X(MemsetD8Async)                \
  X(MemsetD32Async) X(PointerGetAttribute) X(PointerGetAttributes) X(MemGetAddressRange)         \
  X(StreamCreate) X(StreamDestroy) X(StreamSynchronize) X(StreamQuery) X(StreamWaitEvent)        \
  X(StreamIsCapturing) X(StreamBeginCapture) X(StreamEndCapture) X(GraphDestroy)                 \
  X(EventCreate) X(EventDestroy) X(EventRecord) X(EventQuery) X(EventSynchronize)                \
  X(IpcGetMemHandle) X(IpcOpenMemHandle) X(IpcCloseMemHandle) X(ModuleLoadData)                  \
  X(ModuleUnload) X(ModuleGetFunction) X(LaunchKernel) X(MemCreate) X(MemRelease) X(MemMap)      \
  X(MemUnmap) X(MemSetAccess) X(MemAddressReserve) X(MemAddressFree)                             \
  X(MemExportToShareableHandle) X(MemImportFromShareableHandle) X(MemGetAllocationGranularity)   \
  X(MemRetainAllocationHandle)
// clang-format on

CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  static const std::map<std::string, void*> table = {
#define FAKE_ENTRY(f) {"cu" #f, reinterpret_cast<void*>(&cu##f)},
      FAKE_FUNCS(FAKE_ENTRY)
#undef FAKE_ENTRY
  };
  auto it = table.find(symbol);
  if (it == table.end()) {
    *pfn = nullptr;
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = it->second;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // extern "C"
