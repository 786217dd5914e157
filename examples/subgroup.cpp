// A subgroup made by new_group({0, 2, 3}) of a 4-rank job: its members pass a token around the
// subgroup (group ranks, global ranks); rank 1 is not a member and does nothing.
// Run: tprun --nproc-per-node 4 example_subgroup
#include <cstdio>
#include <vector>

#include <tpcomm/tpcomm.hpp>

int main() {
  tpcomm::init_process_group();
  int rank = tpcomm::get_rank();
  auto group = tpcomm::new_group({0, 2, 3});
  if (group->is_member()) {
    int me = group->rank(), n = group->size();
    int32_t token = 0;
    if (me == 0) {
      token = 100;
      group->send(tpcomm::Tensor::of(&token, 1), 1);
      group->recv(tpcomm::Tensor::of(&token, 1), n - 1);
    } else {
      group->recv(tpcomm::Tensor::of(&token, 1), me - 1);
      token += tpcomm::get_global_rank(group, me);
      group->send(tpcomm::Tensor::of(&token, 1), (me + 1) % n);
    }
    if (me == 0) std::printf("subgroup token after one round: %d\n", token);
    std::printf("rank %d is group rank %d of %d\n", rank, me, n);
  } else {
    std::printf("rank %d is not in the subgroup\n", rank);
  }
  tpcomm::destroy_process_group();
  return 0;
}
