// Memory-kind queries (cuda::query), their cache, and the check of CUDA-labelled tensors.
#include <vector>

#include "cuda/cuda_test_util.h"
#include "tpcomm/error.hpp"

namespace tpcomm {
namespace {

using testing::drv;

class MemoryKind : public ::testing::Test {
 protected:
  void SetUp() override {
    cuda::use_device(drv(), 0);
    cuda::clear_memory_cache();
  }
  const cuda::Driver& d() { return drv(); }
  int devices() { return cuda::driver_status().devices; }
};

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST_F(MemoryKind, EachKind) {
  std::vector<char> host(100);
  EXPECT_EQ(cuda::query(host.data()).kind, cuda::MemoryKind::Host);
  EXPECT_EQ(cuda::query(host.data()).str(), "host memory");

  CUdeviceptr dev = 0;
  CU_ASSERT(d().MemAlloc(&dev, 1000));
  auto m = cuda::query(reinterpret_cast<void*>(dev + 100));
  EXPECT_EQ(m.kind, cuda::MemoryKind::Device);
  EXPECT_EQ(m.device, 0);
  EXPECT_EQ(m.base, dev);
  EXPECT_EQ(m.size, 1000u);
  unsigned long long id = 0;
  CU_ASSERT(d().PointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, dev));
  EXPECT_EQ(m.buffer_id, id);
  EXPECT_HAS(m.str(), "device memory of cuda:0 (allocation 0x");

  void* pinned = nullptr;
  CU_ASSERT(d().MemHostAlloc(&pinned, 4096, 0));
  EXPECT_EQ(cuda::query(pinned).kind, cuda::MemoryKind::PinnedHost);
  CUdeviceptr managed = 0;
  CU_ASSERT(d().MemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL));
  EXPECT_EQ(cuda::query(reinterpret_cast<void*>(managed)).kind, cuda::MemoryKind::Managed);

  if (devices() > 1) {
    cuda::use_device(d(), 1);
    CUdeviceptr dev1 = 0;
    CU_ASSERT(d().MemAlloc(&dev1, 64));
    EXPECT_EQ(cuda::query(reinterpret_cast<void*>(dev1)).device, 1);
    CU_ASSERT(d().MemFree(dev1));
    cuda::use_device(d(), 0);
  }
  CU_ASSERT(d().MemFree(managed));
  CU_ASSERT(d().MemFreeHost(pinned));
  CU_ASSERT(d().MemFree(dev));
}

TEST_F(MemoryKind, CacheAnswersInsideAnAllocation) {
  CUdeviceptr dev = 0;
  CU_ASSERT(d().MemAlloc(&dev, 1 << 20));
  const uint64_t before = cuda::full_queries();
  const auto first = cuda::query(reinterpret_cast<void*>(dev));
  EXPECT_EQ(cuda::full_queries(), before + 1);
  for (size_t off : {size_t{8}, size_t{4096}, (size_t{1} << 20) - 1}) {
    const auto m = cuda::query(reinterpret_cast<void*>(dev + off));
    EXPECT_EQ(m.buffer_id, first.buffer_id);
    EXPECT_EQ(m.base, dev);
  }
  EXPECT_EQ(cuda::full_queries(), before + 1) << "interior pointers are answered by the cache";
  CU_ASSERT(d().MemFree(dev));
}

// Freed memory whose address comes back in a new allocation: the cached entry is stale (its
// buffer id is gone) and the answer is the new allocation's.
TEST_F(MemoryKind, ReusedAddressGetsTheNewAllocation) {
  if (auto reuse = testing::fake_fn<void (*)(int)>("tpcomm_fake_cuda_set_reuse")) reuse(1);
  CUdeviceptr a = 0, b = 0;
  CU_ASSERT(d().MemAlloc(&a, 8192));
  const auto old = cuda::query(reinterpret_cast<void*>(a));
  CU_ASSERT(d().MemFree(a));
  CU_ASSERT(d().MemAlloc(&b, 8192));
  if (drv().fake) {
    EXPECT_EQ(b, a) << "the fake hands the freed range out again";
  }
  const auto now = cuda::query(reinterpret_cast<void*>(b));
  unsigned long long id = 0;
  CU_ASSERT(d().PointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, b));
  EXPECT_EQ(now.buffer_id, id);
  EXPECT_NE(now.buffer_id, old.buffer_id);
  CU_ASSERT(d().MemFree(b));
  if (auto reuse = testing::fake_fn<void (*)(int)>("tpcomm_fake_cuda_set_reuse")) reuse(0);
}

TEST_F(MemoryKind, MislabelledTensorsAreRefusedNamingBoth) {
  std::vector<float> host(16);
  Tensor t = Tensor::of(host);
  t.device = Device::cuda(0);
  std::string e = error_text([&] { cuda::check_device_tensor(t, "all_reduce (rank 0): input"); });
  EXPECT_HAS(e, "all_reduce (rank 0): input is labelled cuda:0 but its data 0x");
  EXPECT_HAS(e, "is host memory");

  void* pinned = nullptr;
  CU_ASSERT(d().MemHostAlloc(&pinned, 64, 0));
  t = Tensor::of(static_cast<float*>(pinned), 16);
  t.device = Device::cuda(0);
  EXPECT_HAS(error_text([&] { cuda::check_device_tensor(t, "x"); }), "is pinned host memory");
  CU_ASSERT(d().MemFreeHost(pinned));

  CUdeviceptr dev = 0;
  CU_ASSERT(d().MemAlloc(&dev, 64));
  t = Tensor::of(reinterpret_cast<float*>(dev), 16);
  t.device = Device::cuda(0);
  EXPECT_EQ(error_text([&] { cuda::check_device_tensor(t, "x"); }), "no error");
  t.numel = 17;
  EXPECT_HAS(error_text([&] { cuda::check_device_tensor(t, "x"); }), "run past the end");
  t.numel = 16;
  t.device = Device::cuda(devices());
  EXPECT_HAS(error_text([&] { cuda::check_device_tensor(t, "x"); }),
             "x is labelled cuda:" + std::to_string(devices()) + " but this process sees");
  if (devices() > 1) {
    t.device = Device::cuda(1);
    e = error_text([&] { cuda::check_device_tensor(t, "x"); });
    EXPECT_HAS(e, "x is labelled cuda:1 but its data");
    EXPECT_HAS(e, "is device memory of cuda:0");
  }
  t.device = Device::cuda(0);
  e = error_text([&] { cuda::refuse_device_tensor(t, "send: tensor"); });
  EXPECT_HAS(
      e, "send: tensor is a CUDA tensor (float32[16] on cuda:0): this path moves host memory only");
  CU_ASSERT(d().MemFree(dev));
}

}  // namespace
}  // namespace tpcomm
