// Averaging a model's parameters over the ranks (local SGD style): every rank's weights
// differ, one coalesced all_reduce per dtype makes them equal to the mean.
// Run: tprun --nproc-per-node 2 example_averaging
#include <cstdio>
#include <vector>

#include <tpcomm/tpcomm.hpp>

int main() {
  tpcomm::init_process_group();
  int rank = tpcomm::get_rank();
  std::vector<float> weight(3, 1.0f + rank), bias(2, 10.0f * rank);
  std::vector<tpcomm::Parameter> params = {{tpcomm::Tensor::of(weight), true},
                                           {tpcomm::Tensor::of(bias), true}};
  tpcomm::average_parameters_or_parameter_groups(params);
  std::printf("rank %d averaged weight [%g, %g, %g] bias [%g, %g]\n", rank, weight[0], weight[1],
              weight[2], bias[0], bias[1]);
  tpcomm::destroy_process_group();
  return 0;
}
