// Kernels of the fake CUDA driver: cuLaunchKernel runs the host twin registered under the
// kernel's name (see fake_cuda.h). A twin is registered with a Prepare function, called inside
// cuLaunchKernel while the arguments are valid: it reads them, translates each device pointer
// with the range it will touch (so that an out-of-bounds or foreign pointer fails the launch,
// as it would fault on a GPU), and returns the work to run in the stream's order.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <functional>

namespace fake {

struct Launch {
  unsigned grid[3];
  unsigned block[3];
  void** params;
  /// Threads in the whole grid.
  size_t threads() const {
    return size_t{grid[0]} * grid[1] * grid[2] * block[0] * block[1] * block[2];
  }
};

/// Where the fake keeps [p, p + bytes) of device memory usable by the launching device;
/// nullptr when that range is not entirely such memory.
using Translate = std::function<void*(CUdeviceptr p, size_t bytes)>;

/// Validates a launch and binds its arguments; *run gets the work. Returns CUDA_SUCCESS or
/// the error cuLaunchKernel returns.
using Prepare = CUresult (*)(const Launch& l, const Translate& translate,
                             std::function<void()>* run);

/// Registers a twin (called by register_twins()).
void register_kernel(const char* name, Prepare prepare);

/// Registers every twin the fake knows (defined with the twins).
void register_twins();

}  // namespace fake
