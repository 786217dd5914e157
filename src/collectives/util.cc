// Reducer and pipelining parameters.
#include "collectives/util.h"

#include <algorithm>
#include <cstring>

#include "core/config.h"
#include "core/reduce.h"

namespace tpcomm::coll {

ExecParams exec_params(const CommonOptions& options, size_t esize) {
  ExecParams p;
  size_t slice = options.slice_bytes;
  if (slice == 0) {
    // TPCOMM_BUFFSIZE, read again only when the configuration moved (one atomic load a call).
    thread_local uint64_t seen = UINT64_MAX;
    thread_local size_t buffsize = 0;
    const uint64_t g = config::generation();
    if (g != seen) {
      buffsize = static_cast<size_t>(config::get_size("TPCOMM_BUFFSIZE"));
      seen = g;
    }
    slice = buffsize / 8;
  }
  if (esize == 0) esize = 1;
  slice = std::max(esize, slice / esize * esize);
  p.slice_bytes = slice;
  return p;
}

Reducer::Reducer(DType dtype, ReduceOp op, double premul_scale)
    : dtype_(dtype), op_(op), scale_(premul_scale), esize_(dtype_size(dtype)) {
  merge_op_ = (op == ReduceOp::AVG || op == ReduceOp::PREMUL_SUM) ? ReduceOp::SUM : op;
}

void Reducer::merge(void* dst, const void* a, const void* b, size_t count) const {
  if (count == 0) return;
  kernels::reduce2(dst, a, b, count, dtype_, merge_op_);
}

void Reducer::merge_streaming(void* dst, const void* a, const void* b, size_t count) const {
  if (count == 0) return;
  kernels::reduce2_on(kernels::active_isa(), dst, a, b, count, dtype_, merge_op_, 1.0,
                      /*nt_threshold=*/0);
}

void Reducer::load(void* dst, const void* src, size_t count) const {
  if (count == 0) return;
  if (op_ == ReduceOp::PREMUL_SUM) {
    kernels::scale(dst, src, count, dtype_, scale_);
  } else if (dst != src) {
    std::memcpy(dst, src, count * esize_);
  }
}

void Reducer::finish(void* data, size_t count, int nranks) const {
  if (op_ == ReduceOp::AVG && count > 0) kernels::finish_avg(data, count, dtype_, nranks);
}

}  // namespace tpcomm::coll
