// Catalogue lookup, TPCOMM_ALGO parsing and the cost model.
#include "collectives/select.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <sstream>

#include "collectives/allgather/allgather.h"
#include "collectives/allreduce/allreduce.h"
#include "collectives/alltoall/alltoall.h"
#include "collectives/barrier/barrier.h"
#include "collectives/broadcast/broadcast.h"
#include "collectives/gather/gather.h"
#include "collectives/patterns/recursive.h"
#include "collectives/reduce/reduce.h"
#include "collectives/reduce_scatter/reduce_scatter.h"
#include "collectives/scatter/scatter.h"
#include "collectives/shm/catalogue.h"
#include "core/config.h"
#include "core/log.h"
#include "tpcomm/error.hpp"

namespace tpcomm::coll {

namespace {

constexpr const char* kOpNames[kNumCollOps] = {"broadcast",     "allreduce", "reduce",
                                               "allgather",     "gather",    "scatter",
                                               "reducescatter", "alltoall",  "barrier"};

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

[[noreturn]] void bad_rule(std::string_view rule, const std::string& why) {
  throw ConfigError("TPCOMM_ALGO: bad rule '" + std::string(rule) + "': " + why +
                    ". Rules look like 'allreduce:ring;broadcast:tree' or "
                    "'allreduce:0-64k:recursive_doubling'");
}

uint64_t parse_bound(std::string_view rule, const std::string& s, uint64_t empty_value) {
  if (s.empty()) return empty_value;
  auto v = config::parse_size(s);
  if (!v) bad_rule(rule, "'" + s + "' is not a size (use 4096, 64k, 1M, ...)");
  return *v;
}

}  // namespace

const char* coll_op_name(CollOp op) {
  int i = static_cast<int>(op);
  return i >= 0 && i < kNumCollOps ? kOpNames[i] : "unknown";
}

std::optional<CollOp> parse_coll_op(std::string_view name) {
  std::string key;
  for (char c : name) {
    if (c != '_' && c != '-') key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  for (int i = 0; i < kNumCollOps; ++i) {
    if (key == kOpNames[i]) return static_cast<CollOp>(i);
  }
  return std::nullopt;
}

std::string coll_op_names() {
  std::string s;
  for (int i = 0; i < kNumCollOps; ++i) s += (i ? ", " : "") + std::string(kOpNames[i]);
  return s;
}

std::span<const AlgoInfo> catalogue(CollOp op) {
  switch (op) {
    case CollOp::Broadcast:
      return broadcast_catalogue();
    case CollOp::AllReduce:
      return allreduce_catalogue();
    case CollOp::Reduce:
      return reduce_catalogue();
    case CollOp::AllGather:
      return allgather_catalogue();
    case CollOp::Gather:
      return gather_catalogue();
    case CollOp::Scatter:
      return scatter_catalogue();
    case CollOp::ReduceScatter:
      return reduce_scatter_catalogue();
    case CollOp::AllToAll:
      return alltoall_catalogue();
    case CollOp::Barrier:
      return barrier_catalogue();
  }
  return {};
}

const AlgoInfo* find_algorithm(CollOp op, std::string_view name) {
  for (const AlgoInfo& a : catalogue(op)) {
    if (name == a.name) return &a;
  }
  return shm::find_shm_algorithm(op, name);  // run by shm::HostColl, not here
}

std::string algorithm_names(CollOp op) {
  std::string s;
  for (const AlgoInfo& a : catalogue(op)) s += (s.empty() ? "" : ", ") + std::string(a.name);
  for (const AlgoInfo& a : shm::shm_catalogue(op))
    s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

std::vector<AlgoRule> parse_algo_rules(std::string_view text) {
  std::vector<AlgoRule> rules;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find_first_of(";,", pos);
    if (end == std::string_view::npos) end = text.size();
    std::string rule = trim(text.substr(pos, end - pos));
    pos = end + 1;
    if (rule.empty()) continue;
    std::vector<std::string> parts;
    size_t p = 0;
    for (;;) {
      size_t c = rule.find(':', p);
      parts.push_back(trim(std::string_view(rule).substr(p, c == std::string::npos ? c : c - p)));
      if (c == std::string::npos) break;
      p = c + 1;
    }
    if (parts.size() != 2 && parts.size() != 3) {
      bad_rule(rule, "expected op:algorithm or op:min-max:algorithm");
    }
    AlgoRule r;
    auto op = parse_coll_op(parts[0]);
    if (!op)
      bad_rule(rule, "unknown collective '" + parts[0] + "' (valid: " + coll_op_names() + ")");
    r.op = *op;
    const std::string& algo = parts.back();
    r.algo = find_algorithm(r.op, algo);
    if (r.algo == nullptr) {
      bad_rule(rule, "unknown algorithm '" + algo + "' for " + coll_op_name(r.op) +
                         " (valid: " + algorithm_names(r.op) + ")");
    }
    if (parts.size() == 3) {
      const std::string& range = parts[1];
      size_t dash = range.find('-');
      if (dash == std::string::npos) bad_rule(rule, "size range '" + range + "' has no '-'");
      r.lo = parse_bound(rule, trim(range.substr(0, dash)), 0);
      r.hi = parse_bound(rule, trim(range.substr(dash + 1)), UINT64_MAX);
      if (r.lo > r.hi) bad_rule(rule, "size range '" + range + "' is empty (min > max)");
    }
    rules.push_back(r);
    if (end == text.size()) break;
  }
  return rules;
}

double estimate_us(CollOp op, const AlgoInfo& algo, uint64_t bytes, int nranks,
                   const TransportHints& h, size_t slice_bytes) {
  const double n = nranks, m = static_cast<double>(bytes);
  const double a = h.latency_us;
  const double b = 1.0 / (std::max(h.bandwidth_gbps, 1e-6) * 1e3);  // us per byte
  const double g = 1.0 / (std::max(h.reduce_gbps, 1e-6) * 1e3);
  const double copy = g / 2;  // memcpy runs about twice as fast as a reduction
  const double slice = static_cast<double>(std::max<size_t>(slice_bytes, 1));
  if (nranks <= 1) return 0;
  const double L = std::ceil(std::log2(n));
  recursive::Fold fold(nranks);
  const double p = fold.pof2, lp = recursive::log2_exact(fold.pof2);
  const double f = fold.rem > 0 ? 1 : 0;  // the fold's two extra steps
  const double depth = L + 1;             // of the double binary tree, about log2(n)
  // A pipeline of `stages` hops carrying `total` bytes in slices, each hop moving `per_hop`
  // times the slice (fan-out).
  auto pipeline = [&](double stages, double total, double per_hop) {
    double chunks = std::max(1.0, std::ceil(total / slice));
    double chunk = total / chunks;
    return (stages + chunks - 1) * (a + chunk * per_hop * b);
  };
  std::string_view name = algo.name;
  switch (op) {
    case CollOp::AllReduce:
      if (name == "ring") {
        return 2 * (n - 1) * a + (n - 1) / n * m * (b + std::max(b, g)) +
               std::max(0.0, std::ceil(m / n / slice) - 1) * a;
      }
      if (name == "tree") return 2 * depth * a + 2 * m * b + std::ceil(m / 2 / slice) * a;
      if (name == "recursive_doubling") {
        return (lp + 2 * f) * a + lp * m * (b + g) + f * m * (2 * b + g);
      }
      if (name == "rabenseifner") {
        return (2 * lp + 2 * f) * a + (p - 1) / p * m * (2 * b + g) + f * m * (2 * b + g);
      }
      break;
    case CollOp::Broadcast:
      if (name == "binomial") return L * (a + m * b);
      if (name == "ring") return pipeline(n - 1, m, 1);
      if (name == "tree") return pipeline(depth, m / 2, 2) + a;
      break;
    case CollOp::Reduce:
      if (name == "binomial") return L * (a + m * (b + g));
      if (name == "tree") return pipeline(depth, m / 2, 2) + m * g + a;
      break;
    case CollOp::AllGather:
      if (name == "ring") return (n - 1) * (a + m / n * b);
      if (name == "bruck") return L * a + (n - 1) / n * m * b + m * copy;
      break;
    case CollOp::ReduceScatter:
      if (name == "ring") return (n - 1) * (a + m / n * (b + g)) + m * copy;
      if (name == "recursive_halving") {
        return (lp + 2 * f) * a + (p - 1) / p * m * (b + g) + f * m * (b + g) + m * copy;
      }
      break;
    case CollOp::Gather:
    case CollOp::Scatter:
      if (name == "linear") return a * (1 + 0.5 * (n - 1)) + (n - 1) / n * m * b;
      if (name == "binomial") return L * a + (n - 1) / n * m * b + m * copy;
      break;
    case CollOp::AllToAll:
      if (name == "pairwise") return (n - 1) * (a + m / n * b);
      if (name == "linear") return a * (1 + 0.5 * (n - 1)) + 1.5 * (n - 1) / n * m * b;
      break;
    case CollOp::Barrier:
      return L * a;
  }
  return 1e300;
}

namespace {

// TPCOMM_ALGO parsed again only when the configuration moved (tests change it between calls
// through config::reload()): per thread, so a call costs one atomic load and no lock.
const std::vector<AlgoRule>& env_rules() {
  thread_local uint64_t seen = UINT64_MAX;
  thread_local std::vector<AlgoRule> rules;
  const uint64_t g = config::generation();
  if (g != seen) {
    rules = parse_algo_rules(config::get_string("TPCOMM_ALGO"));  // throws: stays unparsed
    seen = g;
  }
  return rules;
}

}  // namespace

const AlgoInfo& select_algorithm(CollOp op, uint64_t bytes, int nranks, const TransportHints& hints,
                                 const CommonOptions& options, size_t slice_bytes) {
  std::span<const AlgoInfo> algos = catalogue(op);
  // shm_direct forced but not running (no shared memory here): the cost model decides.
  bool forced_shm = false;
  if (!options.algorithm.empty()) {
    const AlgoInfo* a = find_algorithm(op, options.algorithm);
    if (a == nullptr) {
      throw InvalidArgument(std::string(coll_op_name(op)) + ": unknown algorithm '" +
                            options.algorithm + "' (valid: " + algorithm_names(op) + ")");
    }
    if (!shm::is_shm_algorithm(*a)) return *a;
    forced_shm = true;
  }
  for (const AlgoRule& r : env_rules()) {
    if (forced_shm) break;
    if (r.op == op && bytes >= r.lo && bytes <= r.hi) {
      if (shm::is_shm_algorithm(*r.algo)) break;
      return *r.algo;
    }
  }
  // The cost model's last answer, per thread: a training step or a benchmark repeats the same
  // call, and the model costs more than the transport's work for a small message.
  struct Memo {
    CollOp op;
    uint64_t bytes;
    int nranks;
    double latency_us, bandwidth_gbps, reduce_gbps;
    size_t slice_bytes;
    const AlgoInfo* algo = nullptr;
  };
  thread_local Memo memo{};
  if (memo.algo != nullptr && memo.op == op && memo.bytes == bytes && memo.nranks == nranks &&
      memo.latency_us == hints.latency_us && memo.bandwidth_gbps == hints.bandwidth_gbps &&
      memo.reduce_gbps == hints.reduce_gbps && memo.slice_bytes == slice_bytes)
    return *memo.algo;
  const AlgoInfo* best = &algos[0];
  double best_t = estimate_us(op, *best, bytes, nranks, hints, slice_bytes);
  for (const AlgoInfo& a : algos.subspan(1)) {
    double t = estimate_us(op, a, bytes, nranks, hints, slice_bytes);
    if (t < best_t) {
      best = &a;
      best_t = t;
    }
  }
  memo.op = op;
  memo.bytes = bytes;
  memo.nranks = nranks;
  memo.latency_us = hints.latency_us;
  memo.bandwidth_gbps = hints.bandwidth_gbps;
  memo.reduce_gbps = hints.reduce_gbps;
  memo.slice_bytes = slice_bytes;
  memo.algo = best;
  return *best;
}

}  // namespace tpcomm::coll
