// The CUDA driver contract tpcomm relies on, checked against the fake driver in CI and against
// the real one by tools/gpu_check.sh: contexts, memory and copies, pointer attributes, streams,
// events, capture, modules and launches, and the errors for misuse.
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "cuda/kernels.h"

namespace tpcomm {
namespace {

using testing::drv;

class CudaContract : public ::testing::Test {
 protected:
  void SetUp() override { cuda::use_device(drv(), 0); }
  void TearDown() override {
    testing::fake_delay_us(0);
    if (auto hold = testing::fake_fn<void (*)(int)>("tpcomm_fake_cuda_hold")) hold(0);
  }
  const cuda::Driver& d() { return drv(); }
};

TEST(CudaDriverTable, EveryRequiredEntryResolved) {
  const cuda::Driver& d = drv();
#define TPCOMM_TEST_ENTRY(f) EXPECT_NE(reinterpret_cast<void*>(d.f), nullptr) << "cu" #f;
  TPCOMM_CUDA_FUNCS(TPCOMM_TEST_ENTRY)
#undef TPCOMM_TEST_ENTRY
  EXPECT_TRUE(d.via_proc_address) << "entries should come from cuGetProcAddress";
  EXPECT_TRUE(d.has_vmm());
  int v = 0;
  CU_ASSERT(d.DriverGetVersion(&v));
  EXPECT_GE(v, 12000);
}

TEST(CudaDriverTable, StatusSeesDevices) {
  const cuda::DriverStatus& st = cuda::driver_status();
  ASSERT_TRUE(st.usable) << st.reason;
  EXPECT_GE(st.devices, 1);
  EXPECT_TRUE(cuda::initialized());
  EXPECT_EQ(st.fake, drv().fake);
}

TEST_F(CudaContract, NoCurrentContextIsRefused) {
  std::thread t([&] {
    CUdeviceptr p = 0;
    EXPECT_EQ(d().MemAlloc(&p, 64), CUDA_ERROR_INVALID_CONTEXT);  // a new thread has none
    CUcontext c = reinterpret_cast<CUcontext>(0x1234);
    EXPECT_EQ(d().CtxGetCurrent(&c), CUDA_SUCCESS);
    EXPECT_EQ(c, nullptr);
  });
  t.join();
}

TEST_F(CudaContract, UnknownDeviceOrdinalIsRefused) {
  int n = 0;
  CU_ASSERT(d().DeviceGetCount(&n));
  CUdevice dev = 0;
  EXPECT_EQ(d().DeviceGet(&dev, n), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(d().DeviceGet(&dev, -1), CUDA_ERROR_INVALID_DEVICE);
  CUdevice cur = -1;
  CU_ASSERT(d().CtxGetDevice(&cur));
  EXPECT_EQ(cur, 0);
}

TEST_F(CudaContract, CopiesRoundTripOddSizes) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{4093}, size_t{1} << 20}) {
    std::vector<uint8_t> in(n), out(n, 0);
    for (size_t i = 0; i < n; ++i) in[i] = static_cast<uint8_t>(i * 131 + 7);
    CUdeviceptr a = 0, b = 0;
    CU_ASSERT(d().MemAlloc(&a, n));
    CU_ASSERT(d().MemAlloc(&b, n));
    CU_ASSERT(d().MemcpyHtoD(a, in.data(), n));
    CU_ASSERT(d().MemcpyDtoD(b, a, n));
    CU_ASSERT(d().MemcpyDtoH(out.data(), b, n));
    EXPECT_EQ(out, in) << n;
    CU_ASSERT(d().MemsetD8(b, 0xab, n));
    CU_ASSERT(d().Memcpy(reinterpret_cast<CUdeviceptr>(out.data()), b, n));  // unified
    EXPECT_EQ(out, std::vector<uint8_t>(n, 0xab));
    CU_ASSERT(d().MemFree(a));
    CU_ASSERT(d().MemFree(b));
  }
}

TEST_F(CudaContract, MemsetD32NeedsAlignment) {
  CUdeviceptr a = 0;
  CU_ASSERT(d().MemAlloc(&a, 64));
  CU_ASSERT(d().MemsetD32(a + 4, 0xdeadbeef, 3));
  std::vector<uint32_t> out(16, 0);
  CU_ASSERT(d().MemcpyDtoH(out.data(), a, 64));
  EXPECT_EQ(out[1], 0xdeadbeefu);
  EXPECT_EQ(out[3], 0xdeadbeefu);
  EXPECT_NE(out[4], 0xdeadbeefu);
  EXPECT_NE(d().MemsetD32(a + 2, 1, 1), CUDA_SUCCESS);
  CU_ASSERT(d().MemFree(a));
}

TEST_F(CudaContract, FreedPointersAreRefused) {
  CUdeviceptr a = 0;
  CU_ASSERT(d().MemAlloc(&a, 256));
  CU_ASSERT(d().MemFree(a));
  EXPECT_NE(d().MemFree(a), CUDA_SUCCESS);
  unsigned long long id = 0;
  EXPECT_NE(d().PointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, a), CUDA_SUCCESS);
}

TEST_F(CudaContract, CopyPastTheEndIsRefused) {
  SKIP_UNLESS_FAKE();  // the real driver may accept it when the next allocation is adjacent
  CUdeviceptr a = 0;
  CU_ASSERT(d().MemAlloc(&a, 100));
  std::vector<uint8_t> buf(200);
  EXPECT_EQ(d().MemcpyHtoD(a, buf.data(), 200), CUDA_ERROR_INVALID_VALUE);
  CU_ASSERT(d().MemFree(a));
}

TEST_F(CudaContract, PointerAttributesOfEachKind) {
  CUdeviceptr dev = 0, managed = 0;
  void* pinned = nullptr;
  std::vector<char> registered(8192);
  std::vector<char> plain(64);
  CU_ASSERT(d().MemAlloc(&dev, 1000));
  CU_ASSERT(d().MemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL));
  CU_ASSERT(d().MemHostAlloc(&pinned, 4096, 0));
  CU_ASSERT(d().MemHostRegister(registered.data(), registered.size(), 0));

  auto attrs = [&](uintptr_t p, unsigned* type, int* ordinal, unsigned long long* id,
                   CUdeviceptr* start, size_t* size, unsigned* is_managed) {
    CUpointer_attribute a[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_BUFFER_ID,   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        CU_POINTER_ATTRIBUTE_RANGE_SIZE,  CU_POINTER_ATTRIBUTE_IS_MANAGED};
    void* v[] = {type, ordinal, id, start, size, is_managed};
    return d().PointerGetAttributes(6, a, v, p);
  };
  unsigned type = 9, is_managed = 9;
  int ordinal = 9;
  unsigned long long id = 0, id2 = 0;
  CUdeviceptr start = 0;
  size_t size = 0;
  CU_ASSERT(attrs(dev + 10, &type, &ordinal, &id, &start, &size, &is_managed));
  EXPECT_EQ(type, unsigned{CU_MEMORYTYPE_DEVICE});
  EXPECT_EQ(ordinal, 0);
  EXPECT_EQ(start, dev);
  EXPECT_EQ(size, 1000u);
  EXPECT_EQ(is_managed, 0u);
  EXPECT_NE(id, 0u);
  CUdeviceptr base = 0;
  size_t bsize = 0;
  CU_ASSERT(d().MemGetAddressRange(&base, &bsize, dev + 999));
  EXPECT_EQ(base, dev);
  EXPECT_EQ(bsize, 1000u);

  CU_ASSERT(attrs(managed, &type, &ordinal, &id2, &start, &size, &is_managed));
  EXPECT_EQ(is_managed, 1u);
  EXPECT_NE(id2, id);

  CU_ASSERT(attrs(reinterpret_cast<uintptr_t>(pinned), &type, &ordinal, &id2, &start, &size,
                  &is_managed));
  EXPECT_EQ(type, unsigned{CU_MEMORYTYPE_HOST});
  CU_ASSERT(attrs(reinterpret_cast<uintptr_t>(registered.data()) + 100, &type, &ordinal, &id2,
                  &start, &size, &is_managed));
  EXPECT_EQ(type, unsigned{CU_MEMORYTYPE_HOST});

  CU_ASSERT(attrs(reinterpret_cast<uintptr_t>(plain.data()), &type, &ordinal, &id2, &start, &size,
                  &is_managed));
  EXPECT_EQ(type, 0u) << "pageable host memory is unknown to the driver";
  unsigned t1 = 0;
  EXPECT_NE(d().PointerGetAttribute(&t1, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    reinterpret_cast<uintptr_t>(plain.data())),
            CUDA_SUCCESS);

  EXPECT_NE(d().MemHostRegister(registered.data(), 4096, 0), CUDA_SUCCESS) << "twice";
  CU_ASSERT(d().MemHostUnregister(registered.data()));
  EXPECT_NE(d().MemHostUnregister(registered.data()), CUDA_SUCCESS);
  CU_ASSERT(d().MemFreeHost(pinned));
  CU_ASSERT(d().MemFree(managed));
  CU_ASSERT(d().MemFree(dev));
}

TEST_F(CudaContract, HostCannotReadDeviceMemory) {
  SKIP_UNLESS_FAKE();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  CUdeviceptr a = 0;
  CU_ASSERT(d().MemAlloc(&a, 64));
  EXPECT_DEATH(
      {
        volatile const char* p = reinterpret_cast<const char*>(a);
        std::printf("%d\n", p[0]);
      },
      "");
  CU_ASSERT(d().MemFree(a));
}

// Stream order: while the fake holds its streams, nothing queued has run (the host buffer is
// untouched, the stream not idle); released, with a delay on every operation, the copy runs
// after the memset it waits for, and after cuStreamSynchronize (or the event) the host sees it.
TEST_F(CudaContract, StreamsRunInOrderAndEventsTrackThem) {
  auto hold = testing::fake_fn<void (*)(int)>("tpcomm_fake_cuda_hold");
  testing::fake_delay_us(2000);
  const size_t n = 1 << 16;
  void* host = nullptr;
  CU_ASSERT(d().MemHostAlloc(&host, n, 0));
  std::memset(host, 1, n);
  CUdeviceptr a = 0;
  CU_ASSERT(d().MemAlloc(&a, n));
  CUstream s1 = nullptr, s2 = nullptr;
  CU_ASSERT(d().StreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CU_ASSERT(d().StreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CUevent ev = nullptr;
  CU_ASSERT(d().EventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  if (hold) hold(1);
  CU_ASSERT(d().MemsetD8Async(a, 7, n, s1));
  CU_ASSERT(d().EventRecord(ev, s1));
  CU_ASSERT(d().StreamWaitEvent(s2, ev, 0));
  CU_ASSERT(d().MemcpyDtoHAsync(host, a, n, s2));
  if (hold) {
    EXPECT_EQ(d().StreamQuery(s2), CUDA_ERROR_NOT_READY);
    EXPECT_EQ(d().EventQuery(ev), CUDA_ERROR_NOT_READY);
    EXPECT_EQ(static_cast<const char*>(host)[0], 1) << "the copy cannot have run yet";
    hold(0);
  }
  CU_ASSERT(d().StreamSynchronize(s2));
  EXPECT_EQ(d().EventQuery(ev), CUDA_SUCCESS);
  EXPECT_EQ(std::vector<char>(static_cast<char*>(host), static_cast<char*>(host) + n),
            std::vector<char>(n, 7));
  CU_ASSERT(d().EventSynchronize(ev));
  CU_ASSERT(d().EventDestroy(ev));
  CU_ASSERT(d().StreamDestroy(s1));
  CU_ASSERT(d().StreamDestroy(s2));
  EXPECT_NE(d().StreamDestroy(s1), CUDA_SUCCESS);
  CU_ASSERT(d().MemFree(a));
  CU_ASSERT(d().MemFreeHost(host));
}

TEST_F(CudaContract, CaptureIsReported) {
  CUstream s = nullptr;
  CU_ASSERT(d().StreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  CU_ASSERT(d().StreamIsCapturing(s, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  CU_ASSERT(d().StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CU_ASSERT(d().StreamIsCapturing(s, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_NE(d().StreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS)
      << "the legacy stream cannot be captured";
  CUgraph g = nullptr;
  CU_ASSERT(d().StreamEndCapture(s, &g));
  ASSERT_NE(g, nullptr);
  CU_ASSERT(d().GraphDestroy(g));
  CU_ASSERT(d().StreamIsCapturing(s, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  // Synchronising a capturing stream is refused and invalidates the capture.
  CU_ASSERT(d().StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_EQ(d().StreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(d().StreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CU_ASSERT(d().StreamIsCapturing(s, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  CU_ASSERT(d().StreamDestroy(s));
}

TEST_F(CudaContract, ModuleLoadsAndLaunches) {
  const auto image = cuda::kernel_image();
  ASSERT_FALSE(image.empty());
  CUmodule m = nullptr;
  CU_ASSERT(d().ModuleLoadData(&m, image.data()));
  CUfunction f = nullptr;
  CU_ASSERT(d().ModuleGetFunction(&f, m, "tpcomm_sum_int32"));
  EXPECT_EQ(d().ModuleGetFunction(&f, m, "tpcomm_no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  const size_t n = 1001;
  std::vector<int32_t> a(n), b(n), out(n);
  std::iota(a.begin(), a.end(), -500);
  std::iota(b.begin(), b.end(), 7);
  CUdeviceptr da = 0, db = 0;
  CU_ASSERT(d().MemAlloc(&da, n * 4));
  CU_ASSERT(d().MemAlloc(&db, n * 4));
  CU_ASSERT(d().MemcpyHtoD(da, a.data(), n * 4));
  CU_ASSERT(d().MemcpyHtoD(db, b.data(), n * 4));
  unsigned long long count = n;
  double scale = 1.0;
  void* params[] = {&da, &da, &db, &count, &scale};
  CU_ASSERT(d().LaunchKernel(f, 3, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr));
  CU_ASSERT(d().MemcpyDtoH(out.data(), da, n * 4));  // ordered after the launch (legacy)
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;
  EXPECT_NE(d().LaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS)
      << "more than 1024 threads per block";
  CU_ASSERT(d().MemFree(da));
  CU_ASSERT(d().MemFree(db));
  CU_ASSERT(d().ModuleUnload(m));
  const char garbage[64] = "not a kernel image";
  EXPECT_NE(d().ModuleLoadData(&m, garbage), CUDA_SUCCESS);
}

TEST_F(CudaContract, LaunchOnHostMemoryFails) {
  SKIP_UNLESS_FAKE();  // on a GPU this is an asynchronous fault that poisons the context
  CUmodule m = nullptr;
  CU_ASSERT(d().ModuleLoadData(&m, cuda::kernel_image().data()));
  CUfunction f = nullptr;
  CU_ASSERT(d().ModuleGetFunction(&f, m, "tpcomm_sum_float32"));
  std::vector<float> host(16);
  CUdeviceptr hp = reinterpret_cast<CUdeviceptr>(host.data());
  unsigned long long count = 16;
  double scale = 1.0;
  void* params[] = {&hp, &hp, &hp, &count, &scale};
  EXPECT_EQ(d().LaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  CU_ASSERT(d().ModuleUnload(m));
}

}  // namespace
}  // namespace tpcomm
