// CUDA tensors through a process group: a pointer that is not device memory of the labelled GPU
// is refused before any communication with an error naming both, and the group stays usable. The
// ranks are forked before anything touches CUDA (the parent only points TPCOMM_CUDA_LIB at the
// driver), so each initialises its own.
#include "common/multiproc.h"
#include "cuda/cuda_test_util.h"
#include "tpcomm/tpcomm.hpp"

namespace tpcomm {
namespace {

using testing::RankContext;

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

template <class E, class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<other: ") + e.what() + ">";
  }
  return "";
}

TEST(CudaTensorCheck, RefusedBeforeAnyCommunication) {
  testing::select_cuda_driver();
  auto r = testing::run_ranks(2, [&](RankContext& ctx) {
    InitOptions o;
    o.backend = "tcp";
    o.timeout = std::chrono::seconds(30);
    auto pg = ProcessGroup::create(ctx.store, ctx.rank, ctx.world_size, o);
    const int me = pg->rank();
    const cuda::Driver& d = testing::drv();
    cuda::use_device(d, 0);

    std::vector<float> host(8, 1.0f);
    Tensor mislabelled = Tensor::of(host);
    mislabelled.device = Device::cuda(0);
    std::string e = error_of<InvalidArgument>([&] { pg->all_reduce(mislabelled); });
    EXPECT_TRUE(has(e, "all_reduce (rank " + std::to_string(me) +
                           "): input is labelled cuda:0 but its data 0x"))
        << e;
    EXPECT_TRUE(has(e, "is host memory")) << e;
    e = error_of<InvalidArgument>([&] { pg->send(mislabelled, 1 - me); });
    EXPECT_TRUE(has(e, "is labelled cuda:0 but its data")) << e;

    CUdeviceptr dev = 0;
    CU_ASSERT(d.MemAlloc(&dev, 8 * sizeof(float)));
    Tensor on_gpu = Tensor::of(reinterpret_cast<float*>(dev), 8, Device::cuda(0));
    if (cuda::driver_status().devices > 1) {
      Tensor wrong = on_gpu;
      wrong.device = Device::cuda(1);
      e = error_of<InvalidArgument>([&] { pg->broadcast(wrong, 0); });
      EXPECT_TRUE(has(e, "is labelled cuda:1 but its data")) << e;
      EXPECT_TRUE(has(e, "is device memory of cuda:0")) << e;
    }
    CU_ASSERT(d.MemFree(dev));

    // Nothing was sent: the group still works.
    pg->all_reduce(Tensor::of(host));
    EXPECT_EQ(host, std::vector<float>(8, 2.0f));
    pg->destroy();
  });
  EXPECT_RANKS_OK(r);
}

}  // namespace
}  // namespace tpcomm
