// Test helpers of the shm_coll area: deterministic inputs per (dtype, op, rank), float64
// references and comparisons (exact for integers, relative tolerance for floats).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tpcomm/types.hpp"

namespace tpcomm::shm_test {

/// The dtypes under test and the ops each takes.
std::vector<DType> dtypes();
std::vector<ReduceOp> ops_for(DType dt);

/// Input element i of `rank` for `op`, as a double exactly representable in `dt`.
double input_value(DType dt, ReduceOp op, int rank, size_t i);
/// `count` elements of input_value in `dt`'s encoding.
std::vector<uint8_t> make_input(DType dt, ReduceOp op, int rank, size_t count, size_t first = 0);
/// Expected element i of op over ranks 0..n-1 (integers wrap to `dt`'s width).
double expected_value(DType dt, ReduceOp op, double premul, int n, size_t i);
/// "" if got[k] matches expected_value(first + k) for k < count, else the first mismatch.
std::string check_reduced(DType dt, ReduceOp op, double premul, int n, const void* got,
                          size_t first, size_t count);
/// Element of `dt` at index i of `p`, as a double.
double read_elem(DType dt, const void* p, size_t i);

}  // namespace tpcomm::shm_test
