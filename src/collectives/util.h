// Small helpers every algorithm uses: byte arithmetic on buffers, uninitialised scratch
// memory, the pipelining parameters, and the Reducer that applies a ReduceOp through the
// kernels of core/reduce.h (AVG as SUM then one division; PREMUL_SUM as scaled inputs then
// SUM, so that partial results combine with a plain sum).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "collectives/types.h"
#include "tpcomm/types.hpp"

namespace tpcomm::coll {

inline uint8_t* at(void* p, size_t byte_offset) { return static_cast<uint8_t*>(p) + byte_offset; }
inline const uint8_t* at(const void* p, size_t byte_offset) {
  return static_cast<const uint8_t*>(p) + byte_offset;
}

/// Uninitialised memory for intermediate results (inline when small, else on the heap), freed
/// on scope exit.
class Scratch {
 public:
  Scratch() = default;
  /// Up to kInline bytes live inside the object: a small collective allocates nothing.
  explicit Scratch(size_t bytes)
      : p_(bytes > kInline ? std::make_unique_for_overwrite<uint8_t[]>(bytes) : nullptr),
        n_(bytes) {}
  Scratch(Scratch&& o) noexcept { take(o); }
  Scratch& operator=(Scratch&& o) noexcept {
    if (this != &o) take(o);
    return *this;
  }
  uint8_t* data() const { return n_ == 0 ? nullptr : p_ ? p_.get() : small_; }
  size_t size() const { return n_; }

 private:
  static constexpr size_t kInline = 256;
  // Moves the buffer (inline bytes are copied; the source is left empty).
  void take(Scratch& o) noexcept {
    p_ = std::move(o.p_);
    n_ = o.n_;
    if (!p_ && n_ > 0) std::memcpy(small_, o.small_, n_);
    o.n_ = 0;
  }
  std::unique_ptr<uint8_t[]> p_;
  size_t n_ = 0;
  alignas(64) mutable uint8_t small_[kInline];
};

/// How the chunked (pipelined) algorithms cut their data.
struct ExecParams {
  size_t slice_bytes = 512 * 1024;  ///< a multiple of the element size, at least one element
  int window = 4;                   ///< slices whose receives are posted ahead
};

/// Resolves CommonOptions::slice_bytes (0: TPCOMM_BUFFSIZE / 8) for elements of `esize`.
ExecParams exec_params(const CommonOptions& options, size_t esize);

/// Applies one ReduceOp on one dtype.
class Reducer {
 public:
  Reducer(DType dtype, ReduceOp op, double premul_scale);
  DType dtype() const { return dtype_; }
  ReduceOp op() const { return op_; }
  size_t esize() const { return esize_; }

  /// dst = a (+) b for two partial results (already scaled for PREMUL_SUM). dst may be a or
  /// b. The result does not depend on the order of a and b (the ops are commutative).
  void merge(void* dst, const void* a, const void* b, size_t count) const;
  /// merge() writing an out-of-place result with streaming stores whatever its size: for a
  /// result not read again before it has left the caches (a ring's final block of a large
  /// buffer), so that its lines are not first read for ownership.
  void merge_streaming(void* dst, const void* a, const void* b, size_t count) const;
  /// dst = this rank's contribution from its input: a copy, or the scaled input for
  /// PREMUL_SUM. dst may be src.
  void load(void* dst, const void* src, size_t count) const;
  /// Finishes AVG (divides by `nranks`); nothing for the other ops.
  void finish(void* data, size_t count, int nranks) const;

 private:
  DType dtype_;
  ReduceOp op_;
  ReduceOp merge_op_;
  double scale_;
  size_t esize_;
};

}  // namespace tpcomm::coll
