// Internal to src/collectives/shm: which element types the tiny all_reduce path
// (allreduce_shm_tiny, HostColl's fast lane) takes.
#pragma once

#include <cstddef>

#include "tpcomm/types.hpp"

namespace tpcomm::coll::shm {

/// The element size of a dtype the tiny SUM path adds (float32, int32: 4; float64, int64: 8);
/// 0 for any other, which takes the general path.
inline size_t tiny_sum_elem_size(DType dtype) {
  switch (dtype) {
    case DType::Float32:
    case DType::Int32:
      return 4;
    case DType::Float64:
    case DType::Int64:
      return 8;
    default:
      return 0;
  }
}

}  // namespace tpcomm::coll::shm
