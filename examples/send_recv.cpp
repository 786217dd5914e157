// Point-to-point, as in tensorplay's documentation: rank 0 sends a tensor to rank 1 and waits
// on the returned request; rank 1 receives it. Run: tprun --nproc-per-node 2 example_send_recv
#include <cstdio>
#include <vector>

#include <tpcomm/tpcomm.hpp>

int main() {
  tpcomm::init_process_group();  // env:// (tprun sets RANK, WORLD_SIZE, MASTER_ADDR/PORT)
  int rank = tpcomm::get_rank();
  std::vector<float> tensor(4, 0.0f);
  if (rank == 0) {
    tensor = {1, 2, 3, 4};
    auto req = tpcomm::isend(tpcomm::Tensor::of(tensor), /*dst=*/1);
    req->wait();
    std::printf("rank 0 sent [%g, %g, %g, %g]\n", tensor[0], tensor[1], tensor[2], tensor[3]);
  } else if (rank == 1) {
    auto req = tpcomm::irecv(tpcomm::Tensor::of(tensor), /*src=*/0);
    req->wait();
    std::printf("rank 1 received [%g, %g, %g, %g]\n", tensor[0], tensor[1], tensor[2], tensor[3]);
  }
  tpcomm::destroy_process_group();
  return 0;
}
