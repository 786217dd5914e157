// Catalogue entries of the shm_direct algorithms and their selection.
#include "collectives/shm/catalogue.h"

#include <string>
#include <vector>

#include "collectives/select.h"
#include "core/config.h"

namespace tpcomm::coll::shm {

namespace {

constexpr AlgoInfo kAllReduce[] = {
    {kShmAlgoId, "shm_direct",
     "one host: each rank reduces its slice straight from every peer's shared staging, then "
     "reads the others' slices"}};
constexpr AlgoInfo kBroadcast[] = {
    {kShmAlgoId, "shm_direct", "one host: readers copy from the root's shared staging, pipelined"}};
constexpr AlgoInfo kReduce[] = {
    {kShmAlgoId, "shm_direct",
     "one host: slices reduced straight from the peers' shared staging, the root reads them"}};
constexpr AlgoInfo kAllGather[] = {
    {kShmAlgoId, "shm_direct", "one host: every rank copies each block from its owner's staging"}};
constexpr AlgoInfo kReduceScatter[] = {
    {kShmAlgoId, "shm_direct", "one host: each rank reduces its block from the peers' staging"}};
constexpr AlgoInfo kBarrier[] = {
    {kShmAlgoId, "shm_direct", "one host: every rank posts a flag and reads the others'"}};

}  // namespace

std::span<const AlgoInfo> shm_catalogue(CollOp op) {
  switch (op) {
    case CollOp::AllReduce:
      return kAllReduce;
    case CollOp::Broadcast:
      return kBroadcast;
    case CollOp::Reduce:
      return kReduce;
    case CollOp::AllGather:
      return kAllGather;
    case CollOp::ReduceScatter:
      return kReduceScatter;
    case CollOp::Barrier:
      return kBarrier;
    default:
      return {};
  }
}

const AlgoInfo* find_shm_algorithm(CollOp op, std::string_view name) {
  for (const AlgoInfo& a : shm_catalogue(op)) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

bool is_shm_algorithm(const AlgoInfo& algo) { return algo.id == kShmAlgoId; }

std::vector<AlgoRule> current_algo_rules() {
  return parse_algo_rules(config::get_string("TPCOMM_ALGO"));
}

bool shm_selected(CollOp op, uint64_t bytes, const CommonOptions& options,
                  const std::vector<AlgoRule>& rules) {
  if (!options.algorithm.empty()) return find_shm_algorithm(op, options.algorithm) != nullptr;
  for (const AlgoRule& r : rules) {
    if (r.op == op && bytes >= r.lo && bytes <= r.hi) return is_shm_algorithm(*r.algo);
  }
  return true;
}

}  // namespace tpcomm::coll::shm
