// The CUDA driver's entry points, resolved at run time from TPCOMM_CUDA_LIB (default
// libcuda.so.1): tpcomm never links libcuda or libcudart, so one binary runs with and without
// a GPU, and tests run every CUDA path over the fake driver (tests/cuda_device/).
//
// Each entry is asked of cuGetProcAddress with the CUDA version this code was compiled for
// (the <cuda.h> it sees), so that the driver hands out the variant matching these
// prototypes; where that fails, the versioned symbol the header maps the name to
// (cuMemAlloc -> cuMemAlloc_v2) is looked up with dlsym. Built only with the toolkit.
#pragma once

#include "tpcomm/version.hpp"

#if !TPCOMM_HAVE_CUDA
#error "src/cuda/driver.h needs the CUDA toolkit's headers (TPCOMM_HAVE_CUDA)"
#endif

#include <cuda.h>

#include <string>

namespace tpcomm::cuda {

// X(Name): every required entry; member Name has the type of ::cuName.
// clang-format off
#define TPCOMM_CUDA_FUNCS(X)                                                                     \
  X(Init) X(DriverGetVersion) X(GetErrorName) X(GetErrorString)                                  \
  X(DeviceGet) X(DeviceGetCount) X(DeviceGetName) X(DeviceGetAttribute)                          \
  X(DevicePrimaryCtxRetain) X(DevicePrimaryCtxRelease) X(CtxSetCurrent) X(CtxGetCurrent)         \
  X(CtxGetDevice) X(CtxSynchronize) X(MemAlloc) X(MemFree)                                       \
  X(MemAllocManaged) X(MemHostAlloc) X(MemFreeHost) X(MemHostRegister)                           \
  X(MemHostUnregister) X(MemcpyHtoD) X(MemcpyDtoH) X(MemcpyDtoD)                                 \
  X(Memcpy) X(MemcpyAsync) X(MemcpyHtoDAsync) X(MemcpyDtoHAsync)                                 \
  X(MemcpyDtoDAsync) X(MemsetD8) X(MemsetD32) X(MemsetD8Async)                                   \
  X(MemsetD32Async) X(PointerGetAttribute) X(PointerGetAttributes) X(MemGetAddressRange)         \
  X(StreamCreate) X(StreamDestroy) X(StreamSynchronize) X(StreamQuery)                           \
  X(StreamWaitEvent) X(StreamIsCapturing) X(StreamBeginCapture) X(StreamEndCapture)              \
  X(GraphDestroy) X(EventCreate) X(EventDestroy) X(EventRecord)                                  \
  X(EventQuery) X(EventSynchronize) X(IpcGetMemHandle) X(IpcOpenMemHandle)                       \
  X(IpcCloseMemHandle) X(ModuleLoadData) X(ModuleUnload) X(ModuleGetFunction)                    \
  X(LaunchKernel)
// clang-format on

// X(Name): entries a driver may lack (nullptr then): virtual memory management (CUDA 10.2+),
// dma-buf export of device memory (11.7+, for GPUDirect RDMA), flushing GPUDirect writes.
// clang-format off
#define TPCOMM_CUDA_OPTIONAL_FUNCS(X)                                                            \
  X(MemCreate) X(MemRelease)                                                                     \
  X(MemMap) X(MemUnmap)                                                                          \
  X(MemSetAccess) X(MemAddressReserve)                                                           \
  X(MemAddressFree) X(MemExportToShareableHandle)                                                \
  X(MemImportFromShareableHandle) X(MemGetAllocationGranularity)                                 \
  X(MemRetainAllocationHandle) X(MemGetHandleForAddressRange)                                    \
  X(FlushGPUDirectRDMAWrites)
// clang-format on

/// Function pointers into the driver (or a library with its entry points).
struct Driver {
  std::string library;            ///< the name it was opened by
  bool via_proc_address = false;  ///< every entry found came from cuGetProcAddress
  bool fake = false;  ///< the library exports tpcomm_fake_cuda_version (the test double)
#define TPCOMM_CUDA_MEMBER(f) decltype(&::cu##f) f = nullptr;
  TPCOMM_CUDA_FUNCS(TPCOMM_CUDA_MEMBER)
  TPCOMM_CUDA_OPTIONAL_FUNCS(TPCOMM_CUDA_MEMBER)
#undef TPCOMM_CUDA_MEMBER
  /// True when every VMM entry is present.
  bool has_vmm() const;
};

/// Opens `library` (once per name; never closed) and resolves the table. Does not call
/// cuInit. Throws NotSupportedError naming the library and what is missing.
const Driver& load_driver(const std::string& library);

/// The process's driver: load_driver(TPCOMM_CUDA_LIB), initialised (cuInit) once. Throws
/// NotSupportedError with driver_status().reason when CUDA is unusable here.
const Driver& driver();

/// "CUDA_ERROR_INVALID_VALUE (invalid argument)" for `r`, through the driver's own names
/// where it has them.
std::string error_text(const Driver& d, CUresult r);

/// Throws Error "<what>: <error_text>" unless r is CUDA_SUCCESS.
void check(const Driver& d, CUresult r, const char* what);

/// Makes the primary context of `device` current on this thread (retained once per device
/// for the life of the process), as the runtime API does on first use of a device.
void use_device(const Driver& d, int device);

}  // namespace tpcomm::cuda
