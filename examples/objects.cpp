// Object collectives, as in tensorplay's documentation: objects are bytes the caller
// serializes (to_object / from_object for strings, trivially copyable types and vectors).
// Every rank gathers every rank's greeting; rank 0 broadcasts a config list; a typed gather
// checks that all ranks sent the same type. Run: tprun --nproc-per-node 2 example_objects
#include <cstdio>
#include <string>
#include <tpcomm/tpcomm.hpp>
#include <vector>

int main() {
  tpcomm::init_process_group();  // env:// (tprun sets RANK, WORLD_SIZE, MASTER_ADDR/PORT)
  int rank = tpcomm::get_rank();

  std::vector<tpcomm::Object> all;
  tpcomm::all_gather_object(all, tpcomm::to_object("hello from " + std::to_string(rank)));
  std::string joined;
  for (const tpcomm::Object& o : all)
    joined += (joined.empty() ? "" : ", ") + tpcomm::from_object<std::string>(o);
  std::printf("rank %d gathered [%s]\n", rank, joined.c_str());

  std::vector<tpcomm::Object> config;
  if (rank == 0) config = {tpcomm::to_object(std::string("lr")), tpcomm::to_object(0.5)};
  tpcomm::broadcast_object_list(config, /*src=*/0);
  std::printf("rank %d config %s = %g\n", rank, tpcomm::from_object<std::string>(config[0]).c_str(),
              tpcomm::from_object<double>(config[1]));

  std::vector<tpcomm::TypedObject> typed;
  tpcomm::all_gather_object_enforce_type(nullptr, typed,
                                         tpcomm::make_typed_object(int64_t{7} * (rank + 1)));
  std::printf("rank %d typed gather: %lld, %lld\n", rank,
              static_cast<long long>(tpcomm::from_object<int64_t>(typed[0].bytes)),
              static_cast<long long>(tpcomm::from_object<int64_t>(typed[1].bytes)));
  tpcomm::destroy_process_group();
  return 0;
}
