// tpbench's descriptor table and the values it sends and expects.
#include "bench/bench_ops.h"

#include <cctype>
#include <cmath>
#include <cstring>

namespace tpcomm::bench {

namespace {

using coll::CollOp;

double f_allreduce(int n) { return 2.0 * (n - 1) / n; }
double f_one(int) { return 1.0; }
double f_nm1(int n) { return static_cast<double>(n - 1) / n; }

// Whole-buffer operations: S = count x esize.
Shape shape_whole(size_t bytes, size_t es, int, int, int) {
  size_t c = bytes / es;
  return {c * es, c, c, c, c};
}
// S is the total over the group (all_gather's output, reduce_scatter's input, all_to_all's
// per-rank buffers, gather's and scatter's root buffer): rounded down to a multiple of n.
Shape shape_total(size_t bytes, size_t es, int n, size_t send_mult, size_t recv_mult) {
  size_t per = bytes / es / static_cast<size_t>(n);
  size_t total = per * static_cast<size_t>(n);
  return {total * es, total, per * send_mult, per * recv_mult, per};
}
Shape shape_allgather(size_t b, size_t es, int n, int, int) {
  return shape_total(b, es, n, 1, static_cast<size_t>(n));
}
Shape shape_reduce_scatter(size_t b, size_t es, int n, int, int) {
  return shape_total(b, es, n, static_cast<size_t>(n), 1);
}
Shape shape_alltoall(size_t b, size_t es, int n, int, int) {
  return shape_total(b, es, n, static_cast<size_t>(n), static_cast<size_t>(n));
}
Shape shape_gather(size_t b, size_t es, int n, int rank, int root) {
  return shape_total(b, es, n, 1, rank == root ? static_cast<size_t>(n) : 0);
}
Shape shape_scatter(size_t b, size_t es, int n, int rank, int root) {
  return shape_total(b, es, n, rank == root ? static_cast<size_t>(n) : 0, 1);
}

constexpr OpDesc kOps[] = {
    {"allreduce", CollOp::AllReduce, true, false, true, f_allreduce, shape_whole, "all_reduce"},
    {"broadcast", CollOp::Broadcast, false, true, true, f_one, shape_whole, "broadcast"},
    {"reduce", CollOp::Reduce, true, true, true, f_one, shape_whole, "reduce"},
    {"allgather", CollOp::AllGather, false, false, true, f_nm1, shape_allgather,
     "all_gather_into_tensor"},
    {"reducescatter", CollOp::ReduceScatter, true, false, true, f_nm1, shape_reduce_scatter,
     "reduce_scatter_tensor"},
    {"alltoall", CollOp::AllToAll, false, false, false, f_nm1, shape_alltoall, "all_to_all_single"},
    {"gather", CollOp::Gather, false, true, false, f_nm1, shape_gather, "gather"},
    {"scatter", CollOp::Scatter, false, true, false, f_nm1, shape_scatter, "scatter"},
    {"sendrecv", std::nullopt, false, false, false, f_one, shape_whole, "send"},
};

std::string canonical(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c != '_' && c != '-') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// Wraps an integer to the dtype's width (two's complement), as the kernels do.
int64_t wrap(DType dt, int64_t v) {
  switch (dt) {
    case DType::UInt8:
      return static_cast<uint8_t>(v);
    case DType::Int8:
      return static_cast<int8_t>(v);
    case DType::Int16:
      return static_cast<int16_t>(v);
    case DType::Int32:
      return static_cast<int32_t>(v);
    default:
      return v;
  }
}

}  // namespace

std::span<const OpDesc> bench_ops() { return kOps; }

const OpDesc* find_bench_op(const std::string& name) {
  std::string key = canonical(name);
  for (const OpDesc& d : kOps) {
    if (key == d.name) return &d;
  }
  return nullptr;
}

std::string bench_op_names() {
  std::string s;
  for (const OpDesc& d : kOps) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

double init_value(ReduceOp op, int rank, size_t i) {
  const size_t r = static_cast<size_t>(rank);
  switch (op) {
    case ReduceOp::PRODUCT:
      return (r + i) % 4 == 0 ? 2.0 : 1.0;
    case ReduceOp::BAND:
    case ReduceOp::BOR:
    case ReduceOp::BXOR:
      return static_cast<double>((r * 7 + i * 3) % 16);
    default:
      return static_cast<double>(1 + (r + i) % 3);
  }
}

double expected_reduction(DType dt, ReduceOp op, double scale, int n, size_t i) {
  if (dt == DType::Bool) {
    bool acc = init_value(op, 0, i) != 0;
    for (int k = 1; k < n; ++k) {
      bool x = init_value(op, k, i) != 0;
      switch (op) {
        case ReduceOp::PRODUCT:
        case ReduceOp::MIN:
        case ReduceOp::BAND:
          acc = acc && x;
          break;
        case ReduceOp::BXOR:
          acc = acc != x;
          break;
        default:
          acc = acc || x;
          break;
      }
    }
    return acc ? 1 : 0;
  }
  if (!is_floating(dt)) {
    int64_t acc = static_cast<int64_t>(init_value(op, 0, i));
    for (int k = 1; k < n; ++k) {
      int64_t x = static_cast<int64_t>(init_value(op, k, i));
      switch (op) {
        case ReduceOp::PRODUCT:
          acc = wrap(dt, acc * x);
          break;
        case ReduceOp::MIN:
          acc = std::min(acc, x);
          break;
        case ReduceOp::MAX:
          acc = std::max(acc, x);
          break;
        case ReduceOp::BAND:
          acc &= x;
          break;
        case ReduceOp::BOR:
          acc |= x;
          break;
        case ReduceOp::BXOR:
          acc ^= x;
          break;
        default:
          acc = wrap(dt, acc + x);
          break;
      }
    }
    return static_cast<double>(acc);
  }
  double acc = 0;
  for (int k = 0; k < n; ++k) {
    double x = init_value(op, k, i);
    if (k == 0) {
      acc = x;
    } else if (op == ReduceOp::PRODUCT) {
      acc *= x;
    } else if (op == ReduceOp::MIN) {
      acc = std::min(acc, x);
    } else if (op == ReduceOp::MAX) {
      acc = std::max(acc, x);
    } else {
      acc += x;
    }
  }
  if (op == ReduceOp::AVG) acc /= n;
  if (op == ReduceOp::PREMUL_SUM) acc *= scale;
  return acc;
}

void store_value(DType dt, void* buf, size_t i, double v) {
  uint8_t* p = static_cast<uint8_t*>(buf) + i * dtype_size(dt);
  switch (dt) {
    case DType::Bool:
      *p = v != 0;
      break;
    case DType::UInt8:
      *p = static_cast<uint8_t>(static_cast<int64_t>(v));
      break;
    case DType::Int8: {
      int8_t x = static_cast<int8_t>(static_cast<int64_t>(v));
      std::memcpy(p, &x, 1);
      break;
    }
    case DType::Int16: {
      int16_t x = static_cast<int16_t>(static_cast<int64_t>(v));
      std::memcpy(p, &x, 2);
      break;
    }
    case DType::Int32: {
      int32_t x = static_cast<int32_t>(static_cast<int64_t>(v));
      std::memcpy(p, &x, 4);
      break;
    }
    case DType::Int64: {
      int64_t x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case DType::Float16: {
      uint16_t b = Half(static_cast<float>(v)).bits;
      std::memcpy(p, &b, 2);
      break;
    }
    case DType::BFloat16: {
      uint16_t b = BFloat16(static_cast<float>(v)).bits;
      std::memcpy(p, &b, 2);
      break;
    }
    case DType::Float32: {
      float x = static_cast<float>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case DType::Float64:
      std::memcpy(p, &v, 8);
      break;
  }
}

double load_value(DType dt, const void* buf, size_t i) {
  const uint8_t* p = static_cast<const uint8_t*>(buf) + i * dtype_size(dt);
  switch (dt) {
    case DType::Bool:
      return *p != 0;
    case DType::UInt8:
      return *p;
    case DType::Int8: {
      int8_t x;
      std::memcpy(&x, p, 1);
      return x;
    }
    case DType::Int16: {
      int16_t x;
      std::memcpy(&x, p, 2);
      return x;
    }
    case DType::Int32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case DType::Int64: {
      int64_t x;
      std::memcpy(&x, p, 8);
      return static_cast<double>(x);
    }
    case DType::Float16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return static_cast<float>(Half::from_bits(b));
    }
    case DType::BFloat16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return static_cast<float>(BFloat16::from_bits(b));
    }
    case DType::Float32: {
      float x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case DType::Float64: {
      double x;
      std::memcpy(&x, p, 8);
      return x;
    }
  }
  return 0;
}

bool value_matches(DType dt, double got, double want) {
  if (!is_floating(dt)) return got == want;
  double tol = dt == DType::Float64 ? 1e-12 : dt == DType::Float32 ? 1e-5 : 1e-2;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

}  // namespace tpcomm::bench
