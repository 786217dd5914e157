// Run-time loading of the CUDA driver and the lazy cuInit: see driver.h and cuda.h.
#include <atomic>
#include <memory>
#include <mutex>

#include "core/config.h"
#include "cuda/cuda.h"
#include "tpcomm/error.hpp"
#include "tpcomm/version.hpp"

#ifndef TPCOMM_CUDA_BUILD_TEXT
#define TPCOMM_CUDA_BUILD_TEXT "unknown"
#endif

#if TPCOMM_HAVE_CUDA
#include <dlfcn.h>

#include <map>

#include "core/dynlib.h"
#include "cuda/driver.h"
#endif

namespace tpcomm::cuda {

namespace {
std::atomic<bool> g_ready{false};
}  // namespace

bool built() { return TPCOMM_HAVE_CUDA != 0; }

const char* build_reason() { return TPCOMM_HAVE_CUDA ? "" : TPCOMM_CUDA_BUILD_TEXT; }

bool initialized() { return g_ready.load(std::memory_order_acquire); }

#if !TPCOMM_HAVE_CUDA

const DriverStatus& driver_status() {
  static const DriverStatus s = [] {
    DriverStatus st;
    st.reason = std::string("built without CUDA (") + build_reason() + ")";
    return st;
  }();
  return s;
}

#else

namespace {

#define TPCOMM_STR2(x) #x
#define TPCOMM_XSTR(x) TPCOMM_STR2(x)

using ProcAddressFn = decltype(&::cuGetProcAddress);

// One entry: the base name for cuGetProcAddress, the versioned name <cuda.h> maps it to (for
// dlsym), and where the pointer goes.
void* resolve(void* handle, ProcAddressFn gpa, const char* base, const char* versioned,
              bool* via_gpa) {
  void* p = nullptr;
  if (gpa != nullptr) {
    CUdriverProcAddressQueryResult found{};
    if (gpa(base, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS &&
        found == CU_GET_PROC_ADDRESS_SUCCESS && p != nullptr)
      return p;
  }
  p = dlsym(handle, versioned);
  if (p == nullptr) p = dlsym(handle, base);
  if (p != nullptr) *via_gpa = false;  // found only by name
  return p;
}

std::unique_ptr<Driver> open_driver(const std::string& library) {
  void* h = dynlib::open(library, "cuda: cannot load the CUDA driver",
                         "install the NVIDIA driver, or set TPCOMM_CUDA_LIB");
  auto d = std::make_unique<Driver>();
  d->library = library;
  d->fake = dlsym(h, "tpcomm_fake_cuda_version") != nullptr;
  auto gpa = reinterpret_cast<ProcAddressFn>(dlsym(h, "cuGetProcAddress_v2"));
  d->via_proc_address = gpa != nullptr;
  std::string missing;
#define TPCOMM_CUDA_REQUIRED(f)                                            \
  d->f = reinterpret_cast<decltype(d->f)>(                                 \
      resolve(h, gpa, "cu" #f, TPCOMM_XSTR(cu##f), &d->via_proc_address)); \
  if (d->f == nullptr) missing += std::string(missing.empty() ? "" : ", ") + "cu" #f;
#define TPCOMM_CUDA_OPTIONAL(f)            \
  d->f = reinterpret_cast<decltype(d->f)>( \
      resolve(h, gpa, "cu" #f, TPCOMM_XSTR(cu##f), &d->via_proc_address));
  TPCOMM_CUDA_FUNCS(TPCOMM_CUDA_REQUIRED)
  TPCOMM_CUDA_OPTIONAL_FUNCS(TPCOMM_CUDA_OPTIONAL)
#undef TPCOMM_CUDA_REQUIRED
#undef TPCOMM_CUDA_OPTIONAL
  if (!missing.empty()) {
    throw NotSupportedError("cuda: the driver library '" + library +
                            "' lacks entry points tpcomm needs: " + missing);
  }
  return d;
}

// Names of the codes a driver without cuGetErrorName (or a stub) may leave unnamed.
const char* known_error_name(CUresult r) {
  switch (r) {
    case CUDA_ERROR_INVALID_VALUE:
      return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY:
      return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED:
      return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_STUB_LIBRARY:
      return "CUDA_ERROR_STUB_LIBRARY";
    case CUDA_ERROR_NO_DEVICE:
      return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE:
      return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_CONTEXT:
      return "CUDA_ERROR_INVALID_CONTEXT";
    default:
      return nullptr;
  }
}

DriverStatus init_status() {
  DriverStatus st;
  st.library = config::get_string("TPCOMM_CUDA_LIB");
  const Driver* d = nullptr;
  try {
    d = &load_driver(st.library);
  } catch (const Error& e) {
    st.reason = std::string("no driver (") + e.what() + ")";
    return st;
  }
  st.fake = d->fake;
  if (CUresult r = d->Init(0); r != CUDA_SUCCESS) {
    st.reason = "no driver (cuInit in '" + st.library + "': " + error_text(*d, r) + ")";
    return st;
  }
  d->DriverGetVersion(&st.version);
  if (CUresult r = d->DeviceGetCount(&st.devices); r != CUDA_SUCCESS) {
    st.reason = "cuDeviceGetCount: " + error_text(*d, r);
    return st;
  }
  if (st.devices == 0) {
    st.reason = "the driver sees no CUDA device";
    return st;
  }
  for (int i = 0; i < st.devices; ++i) {
    char name[256] = "?";
    int major = 0, minor = 0;
    d->DeviceGetName(name, sizeof name, i);
    d->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, i);
    d->DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, i);
    st.device_lines.push_back("cuda" + std::to_string(i) + ": " + name + " (sm_" +
                              std::to_string(major * 10 + minor) + ")");
  }
  st.usable = true;
  g_ready.store(true, std::memory_order_release);
  return st;
}

}  // namespace

bool Driver::has_vmm() const {
  return MemCreate && MemRelease && MemMap && MemUnmap && MemSetAccess && MemAddressReserve &&
         MemAddressFree && MemExportToShareableHandle && MemImportFromShareableHandle &&
         MemGetAllocationGranularity && MemRetainAllocationHandle;
}

const Driver& load_driver(const std::string& library) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Driver> > loaded;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = loaded[library];
  if (!slot) slot = open_driver(library);
  return *slot;
}

const DriverStatus& driver_status() {
  static const DriverStatus s = init_status();  // thread-safe: one cuInit, ever
  return s;
}

const Driver& driver() {
  const DriverStatus& st = driver_status();
  if (!st.usable) throw NotSupportedError("CUDA is unusable here: " + st.reason);
  return load_driver(st.library);
}

std::string error_text(const Driver& d, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.GetErrorName == nullptr || d.GetErrorName(r, &name) != CUDA_SUCCESS) name = nullptr;
  if (d.GetErrorString == nullptr || d.GetErrorString(r, &text) != CUDA_SUCCESS) text = nullptr;
  if (name == nullptr) name = known_error_name(r);
  std::string out = name ? name : "CUresult " + std::to_string(static_cast<int>(r));
  if (text != nullptr) out += std::string(" (") + text + ")";
  return out;
}

void check(const Driver& d, CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw Error(std::string(what) + ": " + error_text(d, r));
}

void use_device(const Driver& d, int device) {
  static std::mutex mu;
  static std::map<int, CUcontext> retained;
  CUcontext ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = retained.find(device);
    if (it == retained.end()) {
      CUdevice dev = 0;
      check(d, d.DeviceGet(&dev, device), "cuDeviceGet");
      check(d, d.DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
      retained[device] = ctx;
    } else {
      ctx = it->second;
    }
  }
  check(d, d.CtxSetCurrent(ctx), "cuCtxSetCurrent");
}

#endif  // TPCOMM_HAVE_CUDA

}  // namespace tpcomm::cuda
