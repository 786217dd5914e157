// The driver's status in fresh processes: no library, the toolkit's stub (which loads but whose
// cuInit fails), lazy initialisation (nothing loads the driver before the first CUDA tensor, and
// many threads asking at once initialise it once), and tpinfo's words for each.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collectives/validate.h"
#include "core/json.h"
#include "core/reduce.h"
#include "cuda/cuda_test_util.h"
#include "tpcomm/error.hpp"

namespace tpcomm {
namespace {

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

std::string check_error() {
  std::vector<float> host(4);
  Tensor t = Tensor::of(host);
  t.device = Device::cuda(0);
  try {
    cuda::check_device_tensor(t, "input");
  } catch (const NotSupportedError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception: ") + e.what();
  }
  return "no error";
}

TEST(CudaDriverStatus, MissingLibrary) {
  EXPECT_EQ(testing::run_self("CudaDriverStatusChild.DISABLED_MissingLibrary",
                              {"TPCOMM_CUDA_LIB=/nonexistent/libcuda.so.1"}),
            0);
}

TEST(CudaDriverStatusChild, DISABLED_MissingLibrary) {
  const cuda::DriverStatus& st = cuda::driver_status();
  EXPECT_FALSE(st.usable);
  EXPECT_HAS(st.reason, "no driver (cuda: cannot load the CUDA driver '/nonexistent/libcuda.so.1'");
  EXPECT_HAS(check_error(), "input is labelled cuda:0 but CUDA is unusable here: no driver");
}

TEST(CudaDriverStatus, StubLibraryHasNoDriver) {
  const std::vector<std::string> env = {"TPCOMM_CUDA_LIB=" TPCOMM_TEST_STUB_CUDA};
  EXPECT_EQ(testing::run_self("CudaDriverStatusChild.DISABLED_Stub", env), 0);
}

TEST(CudaDriverStatusChild, DISABLED_Stub) {
  const cuda::DriverStatus& st = cuda::driver_status();
  EXPECT_FALSE(st.usable);
  EXPECT_HAS(st.reason, "no driver (cuInit in '");
  EXPECT_HAS(st.reason, "CUDA_ERROR_STUB_LIBRARY");
  EXPECT_FALSE(cuda::initialized());
  EXPECT_HAS(check_error(), "CUDA is unusable here: no driver (cuInit");
}

TEST(CudaDriverStatus, TpinfoSaysWhy) {
  auto run = [](const std::string& lib) {
    std::string cmd = "TPCOMM_CUDA_LIB='" + lib + "' " TPCOMM_TEST_BIN_DIR "/tpinfo 2>&1";
    std::string out;
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
      pclose(p);
    }
    return out;
  };
  std::string out = run(TPCOMM_TEST_STUB_CUDA);
  EXPECT_HAS(out, "(build: ");
  EXPECT_HAS(out, " cuda-driver -nccl)");
  EXPECT_HAS(out, "  driver   no driver (cuInit in '");
  EXPECT_HAS(out, "CUDA_ERROR_STUB_LIBRARY");
  out = run("/nonexistent/libcuda.so.1");
  EXPECT_HAS(out, "  driver   no driver (cuda: cannot load the CUDA driver");
  testing::select_cuda_driver();
  out = run(config::get_string("TPCOMM_CUDA_LIB"));
  EXPECT_HAS(out, "device(s)");
  EXPECT_HAS(out, "  cuda0: ");
  EXPECT_HAS(out, "  tensors  checked");
}

// tpinfo --json's "cuda" object: the same facts as the text section, for the fake driver and
// for a library that does not load.
TEST(CudaDriverStatus, TpinfoJsonSection) {
  auto run = [](const std::string& lib) {
    std::string cmd =
        "TPCOMM_CUDA_LIB='" + lib + "' timeout -k 5 60 " TPCOMM_TEST_BIN_DIR "/tpinfo --json";
    std::string out;
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
      EXPECT_EQ(pclose(p), 0) << out;
    }
    return json::parse(out, "tpinfo --json");
  };
  testing::select_cuda_driver();
  const std::string fake = config::get_string("TPCOMM_CUDA_LIB");
  json::Json v = run(fake);
  ASSERT_NE(json::find(v, "cuda"), nullptr) << json::dump(v);
  const json::Json& cu = v["cuda"];
  std::vector<std::string> keys;
  for (auto it = cu.begin(); it != cu.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"built", "build_reason", "usable", "library", "version",
                                            "fake", "reason", "devices", "tensors"}));
  EXPECT_TRUE(json::as_bool(cu["built"], "built"));
  EXPECT_EQ(json::as_string(cu["build_reason"], "build_reason"), "");
  EXPECT_TRUE(json::as_bool(cu["usable"], "usable"));
  EXPECT_EQ(json::as_string(cu["library"], "library"), fake);
  EXPECT_GT(json::as_int(cu["version"], "version"), 0);
  EXPECT_TRUE(json::as_bool(cu["fake"], "fake"));
  EXPECT_EQ(json::as_string(cu["reason"], "reason"), "");
  const json::Json& devs = json::as_array(cu["devices"], "devices");
  ASSERT_FALSE(devs.empty());
  EXPECT_EQ(json::as_string(devs[0], "devices[0]").rfind("cuda0: ", 0), 0u) << json::dump(devs);
  EXPECT_EQ(json::as_string(cu["tensors"], "tensors").rfind("checked", 0), 0u);

  v = run("/nonexistent/libcuda.so.1");
  const json::Json& no = v["cuda"];
  EXPECT_FALSE(json::as_bool(no["usable"], "usable"));
  EXPECT_FALSE(json::as_bool(no["fake"], "fake"));
  EXPECT_EQ(json::as_int(no["version"], "version"), 0);
  EXPECT_HAS(json::as_string(no["reason"], "reason"),
             "no driver (cuda: cannot load the CUDA driver");
  EXPECT_TRUE(json::as_array(no["devices"], "devices").empty());
}

TEST(CudaDriverStatus, LazyAndOnce) {
  testing::select_cuda_driver();  // the environment only: nothing is loaded
  EXPECT_EQ(testing::run_self("CudaDriverStatusChild.DISABLED_LazyAndOnce", {}), 0);
}

bool driver_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream ss;
  ss << maps.rdbuf();
  return ss.str().find("libcuda") != std::string::npos;
}

TEST(CudaDriverStatusChild, DISABLED_LazyAndOnce) {
  // Host work touches nothing of CUDA.
  std::vector<float> a(64, 1.0f), b(64, 2.0f);
  kernels::reduce_into(a.data(), b.data(), a.size(), DType::Float32, ReduceOp::SUM);
  coll::check::tensor(Tensor::of(a), "all_reduce", "input", 0);
  EXPECT_FALSE(cuda::initialized());
  EXPECT_FALSE(driver_mapped()) << "the driver was loaded before any CUDA tensor";
  // The first CUDA use from many threads at once: one cuInit.
  std::vector<std::thread> threads;
  std::atomic<int> usable{0};
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] { usable += cuda::driver_status().usable ? 1 : 0; });
  for (auto& t : threads) t.join();
  EXPECT_EQ(usable.load(), 8);
  EXPECT_TRUE(cuda::initialized());
  EXPECT_TRUE(driver_mapped());
  if (auto calls = testing::fake_fn<int (*)()>("tpcomm_fake_cuda_init_calls")) {
    EXPECT_EQ(calls(), 1);
  }
}

}  // namespace
}  // namespace tpcomm
