// Internal: the catalogue entries of the shm_direct algorithms, and whether a call should
// take them (the options' algorithm, then TPCOMM_ALGO, as for the other algorithms). They are
// kept out of the per-operation catalogues of the message-passing engine, which cannot run
// them; select.cc accepts their names and falls back to its cost model when one is forced but
// the host path is unavailable.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "collectives/select.h"

namespace tpcomm::coll::shm {

/// Catalogue id of every shm_direct entry (outside the message-passing ids).
inline constexpr int kShmAlgoId = 100;

/// The shm entries of `op` (one, "shm_direct"; none for ops HostColl does not run).
std::span<const AlgoInfo> shm_catalogue(CollOp op);
/// The shm entry of `op` called `name`, or nullptr.
const AlgoInfo* find_shm_algorithm(CollOp op, std::string_view name);
/// True for an entry of shm_catalogue().
bool is_shm_algorithm(const AlgoInfo& algo);
/// The TPCOMM_ALGO rules now in force (ConfigError when malformed).
std::vector<AlgoRule> current_algo_rules();
/// Whether a call of `op` on `bytes` (nccl-tests' message size) should run shm_direct:
/// the options' algorithm if set, else the first of `rules` matching, else yes.
bool shm_selected(CollOp op, uint64_t bytes, const CommonOptions& options,
                  const std::vector<AlgoRule>& rules);

}  // namespace tpcomm::coll::shm
