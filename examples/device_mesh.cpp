// A 2x2 DeviceMesh ("dp" x "tp") with a reduction along each dimension.
// Run: tprun --nproc-per-node 4 example_device_mesh
#include <cstdio>

#include <tpcomm/tpcomm.hpp>

int main() {
  tpcomm::init_process_group();
  int rank = tpcomm::get_rank();
  auto mesh = tpcomm::init_device_mesh("cpu", {2, 2}, {"dp", "tp"});
  auto coord = mesh->get_coordinate();
  int64_t along_dp = rank, along_tp = rank;
  tpcomm::all_reduce(tpcomm::Tensor::of(&along_dp, 1), tpcomm::ReduceOp::SUM,
                     mesh->get_group("dp"));
  tpcomm::all_reduce(tpcomm::Tensor::of(&along_tp, 1), tpcomm::ReduceOp::SUM,
                     mesh->get_group("tp"));
  std::printf("rank %d at (%lld, %lld): sum over dp = %lld, sum over tp = %lld\n", rank,
              static_cast<long long>(coord[0]), static_cast<long long>(coord[1]),
              static_cast<long long>(along_dp), static_cast<long long>(along_tp));
  tpcomm::destroy_process_group();
  return 0;
}
