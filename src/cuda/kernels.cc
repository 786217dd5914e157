// Loading and launching the embedded kernels: see kernels.h.
#include "cuda/kernels.h"

#include "core/reduce.h"
#include "tpcomm/error.hpp"
#include "tpcomm/version.hpp"

#if TPCOMM_HAVE_CUDA
#include <map>
#include <mutex>

#include "cuda/driver.h"
#include "tpcomm_cuda_fatbin.h"  // generated: the fatbin as 64-bit words (bin2c)
#endif

namespace tpcomm::cuda {

std::string reduce_kernel_name(ReduceOp op, DType dtype) {
  kernels::check_reduce_op(op, dtype);
  const char* o = op == ReduceOp::AVG ? "sum" : reduce_op_name(op);
  return std::string("tpcomm_") + o + "_" + dtype_name(dtype);
}

#if !TPCOMM_HAVE_CUDA

std::span<const unsigned char> kernel_image() { return {}; }

namespace {
[[noreturn]] void no_cuda() {
  throw NotSupportedError("cuda: this build has no GPU kernels (built without CUDA)");
}
}  // namespace

void launch_reduce(void*, const void*, const void*, size_t, DType, ReduceOp, double, void*) {
  no_cuda();
}
void launch_scale(void*, const void*, size_t, DType, double, void*) { no_cuda(); }
void launch_div(void*, size_t, DType, int64_t, void*) { no_cuda(); }

#else

std::span<const unsigned char> kernel_image() {
  return {reinterpret_cast<const unsigned char*>(tpcomm_cuda_fatbin), sizeof tpcomm_cuda_fatbin};
}

namespace {

constexpr unsigned kBlock = 256;
constexpr unsigned kMaxBlocks = 4096;

// The function `name` in the module loaded on the current context's device.
CUfunction function(const Driver& d, const std::string& name) {
  CUdevice dev = 0;
  check(d, d.CtxGetDevice(&dev), "cuda kernels: cuCtxGetDevice (no current context?)");
  static std::mutex mu;
  static std::map<int, CUmodule> modules;
  static std::map<std::pair<int, std::string>, CUfunction> functions;
  std::lock_guard<std::mutex> lock(mu);
  auto f = functions.find({dev, name});
  if (f != functions.end()) return f->second;
  CUmodule& m = modules[dev];
  if (m == nullptr) {
    CUresult r = d.ModuleLoadData(&m, kernel_image().data());
    if (r != CUDA_SUCCESS) {
      m = nullptr;
      check(d, r, "cuda kernels: cuModuleLoadData of tpcomm's fatbin (sm_80, sm_90, sm_100, PTX)");
    }
  }
  CUfunction fn = nullptr;
  check(d, d.ModuleGetFunction(&fn, m, name.c_str()), ("cuModuleGetFunction " + name).c_str());
  functions[{dev, name}] = fn;
  return fn;
}

void launch(const std::string& name, size_t count, void** params, void* stream) {
  if (count == 0) return;
  const Driver& d = driver();
  CUfunction f = function(d, name);
  const size_t blocks = (count + kBlock - 1) / kBlock;
  const unsigned grid = blocks < kMaxBlocks ? static_cast<unsigned>(blocks) : kMaxBlocks;
  check(d,
        d.LaunchKernel(f, grid, 1, 1, kBlock, 1, 1, 0, static_cast<CUstream>(stream), params,
                       nullptr),
        ("cuLaunchKernel " + name).c_str());
}

void check_floating(DType dtype, const char* what) {
  if (!is_floating(dtype)) {
    throw InvalidArgument(std::string("cuda kernels: ") + what +
                          " takes floating-point types, not " + dtype_name(dtype));
  }
}

}  // namespace

void launch_reduce(void* dst, const void* a, const void* b, size_t count, DType dtype, ReduceOp op,
                   double premul_scale, void* stream) {
  const std::string name = reduce_kernel_name(op, dtype);
  auto n = static_cast<unsigned long long>(count);
  void* params[] = {&dst, &a, &b, &n, &premul_scale};
  launch(name, count, params, stream);
}

void launch_scale(void* dst, const void* src, size_t count, DType dtype, double factor,
                  void* stream) {
  check_floating(dtype, "scale");
  auto n = static_cast<unsigned long long>(count);
  void* params[] = {&dst, &src, &n, &factor};
  launch(std::string("tpcomm_scale_") + dtype_name(dtype), count, params, stream);
}

void launch_div(void* dst, size_t count, DType dtype, int64_t divisor, void* stream) {
  check_floating(dtype, "div");
  if (divisor <= 0) throw InvalidArgument("cuda kernels: div needs a positive divisor");
  auto n = static_cast<unsigned long long>(count);
  double s = static_cast<double>(divisor);
  const void* src = dst;
  void* params[] = {&dst, &src, &n, &s};
  launch(std::string("tpcomm_div_") + dtype_name(dtype), count, params, stream);
}

#endif

}  // namespace tpcomm::cuda
