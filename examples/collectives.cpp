// all_reduce, broadcast and barrier on the world. Run: tprun --nproc-per-node 2 example_collectives
#include <cstdio>
#include <vector>

#include <tpcomm/tpcomm.hpp>

int main() {
  tpcomm::init_process_group();
  int rank = tpcomm::get_rank();
  int world = tpcomm::get_world_size();
  std::vector<float> t = {1.0f * rank, 1.0f * rank + 1};
  tpcomm::all_reduce(tpcomm::Tensor::of(t), tpcomm::ReduceOp::SUM);
  std::printf("rank %d all_reduce: [%g, %g]\n", rank, t[0], t[1]);
  std::vector<int64_t> b = {rank == 0 ? 42 : -1};
  tpcomm::broadcast(tpcomm::Tensor::of(b), /*src=*/0);
  std::printf("rank %d broadcast: %lld\n", rank, static_cast<long long>(b[0]));
  auto work = tpcomm::barrier(nullptr, /*async_op=*/true);
  work->wait();
  std::printf("rank %d passed the barrier of %d ranks\n", rank, world);
  tpcomm::destroy_process_group();
  return 0;
}
