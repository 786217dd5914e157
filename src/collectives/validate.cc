// Argument checks with messages that say what to pass instead.
#include "collectives/validate.h"

#include <sstream>

#include "core/reduce.h"
#include "cuda/cuda.h"
#include "tpcomm/error.hpp"

namespace tpcomm::coll::check {

namespace {

std::string where(const char* op, int rank) {
  return std::string(op) + " (rank " + std::to_string(rank) + "): ";
}

}  // namespace

void tensor_failed(const Tensor& t, const char* op, const char* what, int rank) {
  if (t.numel < 0) {
    throw InvalidArgument(where(op, rank) + what + " has a negative element count (" +
                          std::to_string(t.numel) + ")");
  }
  if (t.numel > 0 && t.data == nullptr) {
    throw InvalidArgument(where(op, rank) + what + " has " + std::to_string(t.numel) +
                          " elements but no data pointer");
  }
  if (static_cast<int>(t.dtype) >= kNumDTypes) {
    throw InvalidArgument(where(op, rank) + what + " has an unknown dtype value " +
                          std::to_string(static_cast<int>(t.dtype)));
  }
  if (t.device.type == DeviceType::CUDA) cuda::refuse_device_tensor(t, where(op, rank) + what);
  if (t.device.type != DeviceType::CPU) {
    throw InvalidArgument(where(op, rank) + what + " has an unknown device type " +
                          std::to_string(static_cast<int>(t.device.type)));
  }
  throw Error(where(op, rank) + what + ": tensor_failed called for a valid tensor");
}

void dtype_mismatch(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name,
                    const char* op, int rank) {
  throw InvalidArgument(where(op, rank) + b_name + " has dtype " + dtype_name(b.dtype) + " but " +
                        a_name + " has dtype " + dtype_name(a.dtype) +
                        "; pass tensors of one dtype");
}

void numel_mismatch(const Tensor& t, const char* what, int64_t expected, const std::string& rule,
                    const char* op, int rank) {
  std::ostringstream os;
  os << where(op, rank) << what << " has " << t.numel << " elements but must have " << expected
     << " (" << rule << ")";
  throw InvalidArgument(os.str());
}

void numel_group(const Tensor& t, const char* what, int64_t per_rank, const char* per_rank_name,
                 int n, const char* op, int rank) {
  numel(
      t, what, per_rank * n,
      [&] {
        return "group size " + std::to_string(n) + " x " + per_rank_name + " " +
               std::to_string(per_rank) + " elements";
      },
      op, rank);
}

void root(int root, int size, const char* op, int rank) {
  if (root >= 0 && root < size) return;
  throw InvalidArgument(where(op, rank) + "root " + std::to_string(root) +
                        " is out of range: the group has ranks 0.." + std::to_string(size - 1));
}

void reduce_op(ReduceOp op, DType dtype, const char* op_name, int rank) {
  try {
    kernels::check_reduce_op(op, dtype);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(where(op_name, rank) + e.what());
  }
}

void splits(const std::vector<int64_t>& splits, const char* what, int size, int64_t numel,
            const char* op, int rank) {
  if (splits.size() != static_cast<size_t>(size)) {
    throw InvalidArgument(where(op, rank) + what + " has " + std::to_string(splits.size()) +
                          " entries but the group has " + std::to_string(size) +
                          " ranks; give one count per rank (or none for even blocks)");
  }
  int64_t sum = 0;
  for (size_t i = 0; i < splits.size(); ++i) {
    if (splits[i] < 0) {
      throw InvalidArgument(where(op, rank) + what + "[" + std::to_string(i) + "] is negative (" +
                            std::to_string(splits[i]) + ")");
    }
    sum += splits[i];
  }
  if (sum != numel) {
    throw InvalidArgument(where(op, rank) + what + " sum to " + std::to_string(sum) +
                          " elements but the tensor has " + std::to_string(numel) +
                          "; the split sizes must add up to the tensor's element count");
  }
}

}  // namespace tpcomm::coll::check
