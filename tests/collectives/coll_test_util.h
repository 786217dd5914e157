// Shared helpers of the collective tests: deterministic inputs per (dtype, op, rank), an
// independent reference (exact integer semantics; float64 for floating types), comparison
// within a stated tolerance, and a LocalWorld runner.
//
// Tolerance for floating results (SUM, AVG, PREMUL_SUM, PRODUCT): with u the dtype's unit
// roundoff doubled (float16 2^-10, bfloat16 2^-7, float32 2^-23, float64 2^-52) and n ranks,
// |got - ref| <= (n + 2) * u * S, where S is the sum of the magnitudes of the (scaled) terms
// for sums, and |ref| for products; AVG divides S by n. Every merge rounds once, and a result
// is reached through at most n - 1 merges plus the scaling and the final division. MIN and
// MAX are exact; integers are exact (two's complement wrap-around).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "collectives/comm.h"
#include "tpcomm/types.hpp"

namespace tpcomm::coll::testing {

/// Every dtype, and the (dtype, op) pairs the kernels define.
std::vector<DType> all_dtypes();
std::vector<std::pair<DType, ReduceOp>> reduce_cases();

/// Deterministic input of `count` elements for `rank`, suited to `op` (well-conditioned
/// floats, random integer bits, mostly-true or mostly-false bools for the and/or ops).
std::vector<uint8_t> make_input(DType dt, ReduceOp op, int rank, size_t count, uint64_t seed);

/// Plain pattern bytes for the data-movement ops (no arithmetic).
std::vector<uint8_t> make_bytes(int rank, size_t bytes, uint64_t seed);

/// The expected reduction of `inputs` (one per rank), element-wise.
struct Expected {
  DType dtype = DType::Float32;
  std::vector<double> value;   ///< floating types
  std::vector<double> tol;     ///< floating types
  std::vector<uint64_t> bits;  ///< integer and bool types (truncated to the width)
};
Expected reference(DType dt, ReduceOp op, double scale,
                   const std::vector<std::vector<uint8_t>>& inputs, size_t count);

/// "" when got[0..count) matches expected[offset..offset+count), else a description of the
/// first mismatch.
std::string compare(const Expected& e, const void* got, size_t offset, size_t count);

/// A tensor over a byte vector.
Tensor tensor_of(std::vector<uint8_t>& v, DType dt);

/// Collects failures from rank threads (the first 10), reported on the test thread.
class Failures {
 public:
  void add(int rank, const std::string& what);
  std::vector<std::string> list() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::string> items_;
};

/// Reports every collected failure with ADD_FAILURE (call on the test thread).
void report(const Failures& f);

/// Runs fn on `n` threads over a fresh LocalWorld (60 s per wait) and rethrows the first
/// error.
void run_ranks(int n, const std::function<void(CollComm&)>& fn);

}  // namespace tpcomm::coll::testing
