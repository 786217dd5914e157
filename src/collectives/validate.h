// Argument checks shared by the collectives. Each throws InvalidArgument (NotSupportedError
// for device memory) with a message naming the operation, the rank, what is wrong and what
// is expected. They are local checks: ranks that disagree with each other are caught by the
// process group's signature check, or by the transport's size check.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "tpcomm/types.hpp"

namespace tpcomm::coll::check {

/// Throws the error of tensor() for a tensor that fails it.
[[noreturn]] void tensor_failed(const Tensor& t, const char* op, const char* what, int rank);

/// A usable host tensor: numel >= 0, data present when numel > 0, CPU memory. Inline: it
/// runs on every collective call (the message is built out of line, on failure only).
inline void tensor(const Tensor& t, const char* op, const char* what, int rank) {
  if (t.numel >= 0 && (t.numel == 0 || t.data != nullptr) &&
      static_cast<int>(t.dtype) < kNumDTypes && t.device.type == DeviceType::CPU)
    return;
  tensor_failed(t, op, what, rank);
}

/// Throws the error of same_dtype().
[[noreturn]] void dtype_mismatch(const Tensor& a, const char* a_name, const Tensor& b,
                                 const char* b_name, const char* op, int rank);

/// `b` has the dtype of `a`.
inline void same_dtype(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name,
                       const char* op, int rank) {
  if (a.dtype != b.dtype) dtype_mismatch(a, a_name, b, b_name, op, rank);
}

/// Throws the InvalidArgument of numel() (t.numel != expected).
[[noreturn]] void numel_mismatch(const Tensor& t, const char* what, int64_t expected,
                                 const std::string& rule, const char* op, int rank);

/// t.numel == expected; `rule` explains the expectation ("group size 3 x input 4"): a string,
/// or a callable that makes it, so that the check itself costs no allocation.
template <class Rule>
inline void numel(const Tensor& t, const char* what, int64_t expected, Rule&& rule, const char* op,
                  int rank) {
  if (t.numel == expected) return;
  if constexpr (std::is_invocable_v<Rule>)
    numel_mismatch(t, what, expected, std::string(rule()), op, rank);
  else
    numel_mismatch(t, what, expected, std::string(rule), op, rank);
}

/// t.numel == n x `per_rank` (the elements of `per_rank_name`, e.g. "input", on each rank):
/// the message reads "group size 3 x input 4 elements".
void numel_group(const Tensor& t, const char* what, int64_t per_rank, const char* per_rank_name,
                 int n, const char* op, int rank);

/// 0 <= root < size.
void root(int root, int size, const char* op, int rank);

/// The reduction is defined on the dtype (reduce_op_supports), else a message saying which
/// dtypes the op takes.
void reduce_op(ReduceOp op, DType dtype, const char* op_name, int rank);

/// Split sizes: exactly `size` entries, none negative, summing to `numel`.
void splits(const std::vector<int64_t>& splits, const char* what, int size, int64_t numel,
            const char* op, int rank);

}  // namespace tpcomm::coll::check
