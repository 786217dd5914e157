// Sharing device memory between processes: legacy IPC handles (an interior pointer's handle
// names the whole allocation, the offset travels beside it; a second open is a reference on the
// same mapping; a freed
// allocation's handle does not open;
// a peer that exits holding the mapping does not hurt the exporter) and VMM allocations shared
// as POSIX fds. The peer is this program run again (exec: a fresh process, as CUDA requires
// after cuInit) with the handle in its environment.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "cuda/cuda_test_util.h"

namespace tpcomm {
namespace {

using testing::drv;

constexpr size_t kSize = (size_t{1} << 20) + 100;

uint8_t pattern(size_t i, int round) { return static_cast<uint8_t>(i * 7 + 1 + round * 13); }

std::string hex(const void* p, size_t n) {
  std::string s;
  char b[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "%02x", static_cast<const uint8_t*>(p)[i]);
    s += b;
  }
  return s;
}

void unhex(const std::string& s, void* out, size_t n) {
  ASSERT_EQ(s.size(), 2 * n);
  for (size_t i = 0; i < n; ++i)
    static_cast<uint8_t*>(out)[i] =
        static_cast<uint8_t>(std::stoul(s.substr(2 * i, 2), nullptr, 16));
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int run_child(const std::string& child, const std::vector<std::string>& vars) {
  return testing::run_self("CudaIpcPeer.DISABLED_" + child, vars);
}

class CudaIpc : public ::testing::Test {
 protected:
  void SetUp() override { cuda::use_device(drv(), 0); }
  const cuda::Driver& d() { return drv(); }
};

TEST_F(CudaIpc, LegacyHandleAcrossProcesses) {
  CUdeviceptr a = 0, stale = 0;
  CU_ASSERT(d().MemAlloc(&a, kSize));
  std::vector<uint8_t> in(kSize - 4096);
  for (size_t i = 0; i < in.size(); ++i) in[i] = pattern(i, 0);
  CU_ASSERT(d().MemcpyHtoD(a + 4096, in.data(), in.size()));
  // The handle names the allocation (cuda.h: of its base pointer); the buffer's offset in it
  // travels beside the handle.
  CUdeviceptr base = 0;
  size_t size = 0;
  CU_ASSERT(d().MemGetAddressRange(&base, &size, a + 4096));
  ASSERT_EQ(base, a);
  CUipcMemHandle h{}, hs{};
  CU_ASSERT(d().IpcGetMemHandle(&h, base));
  if (drv().fake) {
    CUipcMemHandle interior{};
    EXPECT_EQ(d().IpcGetMemHandle(&interior, a + 4096), CUDA_ERROR_INVALID_VALUE);
  }
  CU_ASSERT(d().MemAlloc(&stale, 4096));
  CU_ASSERT(d().IpcGetMemHandle(&hs, stale));
  CU_ASSERT(d().MemFree(stale));
  if (drv().fake) {
    CUdeviceptr own = 0;
    EXPECT_NE(d().IpcOpenMemHandle(&own, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_SUCCESS)
        << "only other processes open a handle";
  }
  ASSERT_EQ(run_child("Legacy",
                      {"CUDA_TEST_IPC_HANDLE=" + hex(&h, sizeof h),
                       "CUDA_TEST_IPC_STALE=" + hex(&hs, sizeof hs), "CUDA_TEST_IPC_OFFSET=4096"}),
            0);
  std::vector<uint8_t> out(in.size());
  CU_ASSERT(d().MemcpyDtoH(out.data(), a + 4096, out.size()));
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], pattern(i, 1)) << i;
  // A peer that exits while it holds the mapping: the exporter frees as usual.
  ASSERT_EQ(run_child("Hold", {"CUDA_TEST_IPC_HANDLE=" + hex(&h, sizeof h)}), 0);
  CU_ASSERT(d().MemFree(a));
}

TEST(CudaIpcPeer, DISABLED_Legacy) {
  const cuda::Driver& d = drv();
  cuda::use_device(d, 0);
  CUipcMemHandle h{}, hs{};
  unhex(env("CUDA_TEST_IPC_HANDLE"), &h, sizeof h);
  unhex(env("CUDA_TEST_IPC_STALE"), &hs, sizeof hs);
  const size_t off = std::stoul(env("CUDA_TEST_IPC_OFFSET"));
  CUdeviceptr base = 0, again = 0;
  CU_ASSERT(d.IpcOpenMemHandle(&base, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  // A second open by the same context: one more reference on the same mapping (cuda.h).
  CU_ASSERT(d.IpcOpenMemHandle(&again, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  EXPECT_EQ(again, base);
  CU_ASSERT(d.IpcCloseMemHandle(again));
  std::vector<uint8_t> got(kSize - off);
  CU_ASSERT(d.MemcpyDtoH(got.data(), base + off, got.size()));
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], pattern(i, 0)) << i;
  for (size_t i = 0; i < got.size(); ++i) got[i] = pattern(i, 1);
  CU_ASSERT(d.MemcpyHtoD(base + off, got.data(), got.size()));
  CU_ASSERT(d.CtxSynchronize());
  CU_ASSERT(d.IpcCloseMemHandle(base));
  EXPECT_NE(d.IpcCloseMemHandle(base), CUDA_SUCCESS);
  if (d.fake) {
    CUdeviceptr s = 0;
    EXPECT_NE(d.IpcOpenMemHandle(&s, hs, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_SUCCESS)
        << "the handle of a freed allocation";
  }
}

TEST(CudaIpcPeer, DISABLED_Hold) {
  const cuda::Driver& d = drv();
  cuda::use_device(d, 0);
  CUipcMemHandle h{};
  unhex(env("CUDA_TEST_IPC_HANDLE"), &h, sizeof h);
  CUdeviceptr base = 0;
  CU_ASSERT(d.IpcOpenMemHandle(&base, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  std::fflush(nullptr);
  _exit(0);  // without closing it
}

CUmemAllocationProp device_prop(bool exportable) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  if (exportable) p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}

TEST_F(CudaIpc, VmmFdAcrossProcesses) {
  ASSERT_TRUE(d().has_vmm());
  CUmemAllocationProp prop = device_prop(true);
  size_t g = 0;
  CU_ASSERT(d().MemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUmemGenericAllocationHandle h = 0;
  CU_ASSERT(d().MemCreate(&h, g, &prop, 0));
  CUdeviceptr va = 0;
  CU_ASSERT(d().MemAddressReserve(&va, g, 0, 0, 0));
  CU_ASSERT(d().MemMap(va, g, 0, h, 0));
  if (drv().fake) {
    std::vector<uint8_t> one(16);
    EXPECT_NE(d().MemcpyHtoD(va, one.data(), 16), CUDA_SUCCESS) << "mapped without access";
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_ASSERT(d().MemSetAccess(va, g, &access, 1));
  std::vector<uint8_t> in(g);
  for (size_t i = 0; i < g; ++i) in[i] = pattern(i, 0);
  CU_ASSERT(d().MemcpyHtoD(va, in.data(), g));
  int fd = -1;
  CU_ASSERT(d().MemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  ASSERT_GE(fd, 0);
  fcntl(fd, F_SETFD, 0);  // inherited by the peer
  ASSERT_EQ(run_child("Vmm", {"CUDA_TEST_IPC_FD=" + std::to_string(fd),
                              "CUDA_TEST_IPC_SIZE=" + std::to_string(g)}),
            0);
  close(fd);
  std::vector<uint8_t> out(g);
  CU_ASSERT(d().MemcpyDtoH(out.data(), va, g));
  for (size_t i = 0; i < g; ++i) ASSERT_EQ(out[i], pattern(i, 1)) << i;
  CU_ASSERT(d().MemUnmap(va, g));
  CU_ASSERT(d().MemRelease(h));
  CU_ASSERT(d().MemAddressFree(va, g));

  // An allocation made without the POSIX fd handle type cannot be exported.
  prop = device_prop(false);
  CU_ASSERT(d().MemCreate(&h, g, &prop, 0));
  EXPECT_NE(d().MemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  CU_ASSERT(d().MemRelease(h));
}

TEST(CudaIpcPeer, DISABLED_Vmm) {
  const cuda::Driver& d = drv();
  cuda::use_device(d, 0);
  const int fd = std::stoi(env("CUDA_TEST_IPC_FD"));
  const size_t g = std::stoul(env("CUDA_TEST_IPC_SIZE"));
  CUmemGenericAllocationHandle h = 0;
  CU_ASSERT(d.MemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  CUdeviceptr va = 0;
  CU_ASSERT(d.MemAddressReserve(&va, g, 0, 0, 0));
  CU_ASSERT(d.MemMap(va, g, 0, h, 0));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_ASSERT(d.MemSetAccess(va, g, &access, 1));
  std::vector<uint8_t> got(g);
  CU_ASSERT(d.MemcpyDtoH(got.data(), va, g));
  for (size_t i = 0; i < g; ++i) ASSERT_EQ(got[i], pattern(i, 0)) << i;
  for (size_t i = 0; i < g; ++i) got[i] = pattern(i, 1);
  CU_ASSERT(d.MemcpyHtoD(va, got.data(), g));
  CU_ASSERT(d.MemUnmap(va, g));
  CU_ASSERT(d.MemRelease(h));
  CU_ASSERT(d.MemAddressFree(va, g));
}

}  // namespace
}  // namespace tpcomm
