// Algorithm catalogues and selection. Every operation lists its algorithms
// ({id, "ring", "one-line description"}, in <op>/catalogue.cc). A call runs, in order of
// precedence: the algorithm named in its options; the first TPCOMM_ALGO rule matching the
// operation and message size ("allreduce:ring;broadcast:tree", or with a size range,
// "allreduce:0-64k:recursive_doubling", both ends inclusive, either may be empty); else the
// cheapest under a cost model in the style of NCCL's tuning: per algorithm, latency x steps
// plus bytes / bandwidth (and reduction time for the reducing operations), with pipelined
// algorithms overlapping the reduction with the transfer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/comm.h"
#include "collectives/types.h"

namespace tpcomm::coll {

/// The algorithms of `op`, in id order.
std::span<const AlgoInfo> catalogue(CollOp op);
/// The algorithm of `op` called `name`, or nullptr.
const AlgoInfo* find_algorithm(CollOp op, std::string_view name);
/// "ring, tree, ..." for messages.
std::string algorithm_names(CollOp op);

/// One TPCOMM_ALGO rule: `op` calls whose message size is within [lo, hi] run `algo`.
struct AlgoRule {
  CollOp op = CollOp::AllReduce;
  uint64_t lo = 0;
  uint64_t hi = UINT64_MAX;
  const AlgoInfo* algo = nullptr;
};

/// Parses a TPCOMM_ALGO value: rules separated by ';' (or ','), each "op:algo" or
/// "op:lo-hi:algo" with sizes as 4096, 64k, 1M. Throws ConfigError naming the variable, the
/// bad rule and the valid operation or algorithm names.
std::vector<AlgoRule> parse_algo_rules(std::string_view text);

/// Estimated time (microseconds) of one algorithm on `bytes` bytes over `nranks` ranks.
/// `bytes` is the operation's message size as nccl-tests counts it (the whole tensor for
/// all_reduce, broadcast and reduce; the whole gathered or scattered buffer for all_gather,
/// reduce_scatter, gather and scatter; one rank's send buffer for all_to_all).
double estimate_us(CollOp op, const AlgoInfo& algo, uint64_t bytes, int nranks,
                   const TransportHints& hints, size_t slice_bytes);

/// Picks the algorithm for a call (options, then TPCOMM_ALGO, then the cost model). The
/// result is the same on every rank given the same arguments and environment. Throws
/// InvalidArgument for an unknown name in `options`, ConfigError for a bad TPCOMM_ALGO.
const AlgoInfo& select_algorithm(CollOp op, uint64_t bytes, int nranks, const TransportHints& hints,
                                 const CommonOptions& options, size_t slice_bytes);

}  // namespace tpcomm::coll
