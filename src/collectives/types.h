// Names shared by the collectives: the operations, the catalogue entry describing one
// algorithm, and the per-call options every operation accepts.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tpcomm::coll {

/// The collective operations (list forms map onto these).
enum class CollOp : int {
  Broadcast,
  AllReduce,
  Reduce,
  AllGather,
  Gather,
  Scatter,
  ReduceScatter,
  AllToAll,
  Barrier,
};
inline constexpr int kNumCollOps = 9;

/// The name TPCOMM_ALGO and tpbench use: "broadcast", "allreduce", "reduce", "allgather",
/// "gather", "scatter", "reducescatter", "alltoall", "barrier".
const char* coll_op_name(CollOp op);
/// Parses those names, ignoring case and underscores ("all_reduce" works); nullopt if
/// unknown.
std::optional<CollOp> parse_coll_op(std::string_view name);
/// "broadcast, allreduce, ..." for error messages.
std::string coll_op_names();

/// One algorithm of one operation, as listed in the operation's catalogue.
struct AlgoInfo {
  int id;                   ///< index in the catalogue
  const char* name;         ///< "ring", "tree", ... (what TPCOMM_ALGO names)
  const char* description;  ///< one line
};

/// Options every collective call accepts (Gloo's setAlgorithm, plus pipelining).
struct CommonOptions {
  /// Forces an algorithm by catalogue name; empty: TPCOMM_ALGO, then the cost model.
  std::string algorithm;
  /// Pipelining slice of the chunked algorithms, bytes; 0: TPCOMM_BUFFSIZE / 8.
  size_t slice_bytes = 0;
};

}  // namespace tpcomm::coll
