// Shared by the CUDA tests: they run against tpcomm's fake driver (tests/cuda_device/) unless
// TPCOMM_CUDA_LIB names another library (tools/gpu_check.sh runs them on a GPU with
// libcuda.so.1). Checks that only the fake can make (a host read of device memory crashes, an
// injected stream delay, an out-of-bounds launch failing at once) are skipped on a real driver.
#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "cuda/cuda.h"
#include "cuda/driver.h"

namespace tpcomm::testing {

/// Points TPCOMM_CUDA_LIB at the fake driver unless it is set (before anything loads one).
inline bool select_cuda_driver() {
  static const bool done = [] {
    if (std::getenv("TPCOMM_CUDA_LIB") == nullptr)
      setenv("TPCOMM_CUDA_LIB", TPCOMM_TEST_FAKE_CUDA, 1);
    config::reload();
    return true;
  }();
  return done;
}

/// Every CUDA test program selects the driver before main (a test that asks
/// cuda::driver_status() first then sees the same driver as one that starts with drv()).
inline const bool kCudaDriverSelected = select_cuda_driver();

/// The process's driver, initialised.
inline const cuda::Driver& drv() {
  select_cuda_driver();
  return cuda::driver();
}

/// A control entry of the fake driver (nullptr on a real one).
template <class F>
F fake_fn(const char* name) {
  void* h = dlopen(drv().library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  return h ? reinterpret_cast<F>(dlsym(h, name)) : nullptr;
}

/// Sets the fake's per-operation stream delay (no-op on a real driver).
inline void fake_delay_us(int us) {
  if (auto f = fake_fn<void (*)(int)>("tpcomm_fake_cuda_set_delay_us")) f(us);
}

/// Runs this program's test `filter` (a DISABLED_ one: the peer or fresh-process half of a
/// test) in a new process, with `vars` ("NAME=value") added to the environment. A new process
/// (exec, not fork) is what CUDA needs once the parent called cuInit. Returns its exit status
/// (0: the test passed), -1 when it ran past two minutes (it is killed).
inline int run_self(const std::string& filter, const std::vector<std::string>& vars) {
  std::vector<std::string> args = {"/proc/self/exe", "--gtest_also_run_disabled_tests",
                                   "--gtest_filter=" + filter};
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> all(vars);
  for (char** e = environ; *e; ++e) all.push_back(*e);  // earlier entries win
  for (auto& e : all) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data()) != 0)
    return -2;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace tpcomm::testing

/// Asserts that a driver call succeeded, naming the call and the error.
#define CU_ASSERT(call)                                                                  \
  do {                                                                                   \
    const CUresult cu_r_ = (call);                                                       \
    ASSERT_EQ(cu_r_, CUDA_SUCCESS)                                                       \
        << #call << ": " << ::tpcomm::cuda::error_text(::tpcomm::testing::drv(), cu_r_); \
  } while (0)

/// Skips a check that only the fake driver can make.
#define SKIP_UNLESS_FAKE()                                                            \
  do {                                                                                \
    if (!::tpcomm::testing::drv().fake) GTEST_SKIP() << "needs tpcomm's fake driver"; \
  } while (0)
