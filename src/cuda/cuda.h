// CUDA as the rest of tpcomm sees it: whether this build and this machine can use it, and
// what kind of memory a pointer is. Compiles with or without the CUDA toolkit (it never
// includes <cuda.h>); the driver itself is loaded at run time (driver.h).
//
// Fork safety: nothing here calls cuInit until the first call that needs the driver (the
// first CUDA tensor, tpinfo's report): a process that forks workers before touching CUDA
// leaves them free to use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tpcomm/types.hpp"

namespace tpcomm::cuda {

/// True when this build contains the CUDA support (the toolkit was found at build time).
bool built();

/// Why the build has no CUDA support ("TPCOMM_WITH_CUDA=OFF", "CUDA toolkit not found ...");
/// "" when built().
const char* build_reason();

/// What the driver can do in this process. Filled by driver_status().
struct DriverStatus {
  bool usable = false;  ///< cuInit succeeded
  std::string library;  ///< the library asked for (TPCOMM_CUDA_LIB or libcuda.so.1)
  int version = 0;      ///< cuDriverGetVersion, e.g. 13000; 0 unknown
  int devices = 0;      ///< cuDeviceGetCount
  bool fake = false;    ///< the library is tpcomm's fake driver (tests/cuda_device)
  /// One line per device: "cuda0: NVIDIA H100 80GB HBM3 (sm_90)".
  std::vector<std::string> device_lines;
  std::string reason;  ///< why not usable: "built without CUDA (...)", "no driver (...)"
};

/// Loads the driver and calls cuInit once (thread-safe; the first call pays for both, later
/// calls read the cached result). Never throws.
const DriverStatus& driver_status();

/// True once driver_status() ran and cuInit succeeded. Never loads or initialises anything:
/// callers that must not wake CUDA up (a CPU tensor's check) ask this first.
bool initialized();

/// What a pointer is, as the driver sees it.
enum class MemoryKind : uint8_t {
  Host,        ///< ordinary (pageable) host memory, or memory the driver does not know
  PinnedHost,  ///< page-locked host memory (cuMemHostAlloc, cuMemHostRegister)
  Device,      ///< device memory of GPU `device`
  Managed,     ///< unified memory (cuMemAllocManaged)
};

/// "host", "pinned host", "device", "managed".
const char* memory_kind_name(MemoryKind k);

/// The answer of query(). For host memory the other fields are zero (device -1).
struct MemoryInfo {
  MemoryKind kind = MemoryKind::Host;
  int device = -1;         ///< CUDA ordinal (device and managed memory; pinned: its context's)
  uintptr_t base = 0;      ///< start of the allocation holding the pointer
  size_t size = 0;         ///< size of that allocation
  uint64_t buffer_id = 0;  ///< the driver's id of the allocation (never reused in a process)
  /// "device memory of cuda:1 (allocation 0x7f..+4096)", "host memory", ...
  std::string str() const;
};

/// The kind of memory at `p`. Initialises the driver if needed; throws NotSupportedError when
/// CUDA is unusable here (naming why). Answers come from a cache keyed by allocation: a
/// pointer inside a known allocation costs one buffer-id check, not a full attribute query.
MemoryInfo query(const void* p);

/// Forgets every cached allocation (tests; the cache also drops stale entries by itself).
void clear_memory_cache();

/// Number of full attribute queries made so far (tests check that the cache works).
uint64_t full_queries();

/// Checks that tensor `t` labelled {CUDA, n} lies in device memory of GPU n: throws
/// InvalidArgument naming the label and what the memory is ("labelled cuda:1 but its data
/// 0x... is host memory"), NotSupportedError when CUDA is unusable here. `where` starts the
/// message ("all_reduce (rank 0): input").
void check_device_tensor(const Tensor& t, const std::string& where);

/// A CUDA tensor that reached a path moving host memory only (the collectives below the process
/// group; ProcessGroup stages CUDA tensors before): checks it (check_device_tensor's errors name
/// a mislabelled pointer first), then throws NotSupportedError.
[[noreturn]] void refuse_device_tensor(const Tensor& t, const std::string& where);

}  // namespace tpcomm::cuda
