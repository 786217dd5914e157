// Inputs and references for the shm_coll tests.
#include "shm_coll/shm_coll_helper.h"

#include <cmath>
#include <cstring>
#include <sstream>

namespace tpcomm::shm_test {

namespace {

bool is_int(DType dt) { return dt == DType::Int32 || dt == DType::Int8; }

// Wraps an integer to the width of `dt` (two's complement), as the kernels do.
int64_t wrap(DType dt, int64_t v) {
  if (dt == DType::Int8) return static_cast<int8_t>(static_cast<uint8_t>(v & 0xff));
  return static_cast<int32_t>(static_cast<uint32_t>(v & 0xffffffff));
}

// Rounds a double to the nearest value of `dt`.
double to_dt(DType dt, double v) {
  switch (dt) {
    case DType::Float16:
      return static_cast<float>(Half(static_cast<float>(v)));
    case DType::BFloat16:
      return static_cast<float>(BFloat16(static_cast<float>(v)));
    case DType::Float32:
      return static_cast<float>(v);
    default:
      return v;
  }
}

void write_elem(DType dt, void* p, size_t i, double v) {
  switch (dt) {
    case DType::Int8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      break;
    case DType::Int32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DType::Float16:
      static_cast<Half*>(p)[i] = Half(static_cast<float>(v));
      break;
    case DType::BFloat16:
      static_cast<BFloat16*>(p)[i] = BFloat16(static_cast<float>(v));
      break;
    case DType::Float32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DType::Float64:
      static_cast<double*>(p)[i] = v;
      break;
    default:
      break;
  }
}

}  // namespace

std::vector<DType> dtypes() {
  return {DType::Int32,   DType::Float32, DType::BFloat16,
          DType::Float16, DType::Float64, DType::Int8};
}

std::vector<ReduceOp> ops_for(DType dt) {
  if (is_int(dt)) {
    return {ReduceOp::SUM,  ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX,
            ReduceOp::BAND, ReduceOp::BOR,     ReduceOp::BXOR};
  }
  return {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN,
          ReduceOp::MAX, ReduceOp::AVG,     ReduceOp::PREMUL_SUM};
}

double read_elem(DType dt, const void* p, size_t i) {
  switch (dt) {
    case DType::Int8:
      return static_cast<const int8_t*>(p)[i];
    case DType::Int32:
      return static_cast<const int32_t*>(p)[i];
    case DType::Float16:
      return static_cast<float>(static_cast<const Half*>(p)[i]);
    case DType::BFloat16:
      return static_cast<float>(static_cast<const BFloat16*>(p)[i]);
    case DType::Float32:
      return static_cast<const float*>(p)[i];
    case DType::Float64:
      return static_cast<const double*>(p)[i];
    default:
      return 0;
  }
}

double input_value(DType dt, ReduceOp op, int rank, size_t i) {
  const size_t k = static_cast<size_t>(rank) * 7 + i * 3;
  if (is_int(dt)) {
    if (op == ReduceOp::PRODUCT) return static_cast<double>(k % 5) - 2;  // wraps in int8
    if (op == ReduceOp::BAND || op == ReduceOp::BOR || op == ReduceOp::BXOR) {
      return static_cast<double>(wrap(dt, static_cast<int64_t>((k * 2654435761u) >> 7)));
    }
    return static_cast<double>(wrap(dt, static_cast<int64_t>(k % 2001) - 1000));
  }
  if (op == ReduceOp::PRODUCT)
    return ((k % 2) ? -1.0 : 1.0) * (1.0 + static_cast<double>(k % 3) * 0.25);
  return to_dt(dt, (static_cast<double>(k % 41) - 20) * 0.25);
}

std::vector<uint8_t> make_input(DType dt, ReduceOp op, int rank, size_t count, size_t first) {
  std::vector<uint8_t> v(count * dtype_size(dt) + 1);
  for (size_t i = 0; i < count; ++i)
    write_elem(dt, v.data(), i, input_value(dt, op, rank, first + i));
  return v;
}

double expected_value(DType dt, ReduceOp op, double premul, int n, size_t i) {
  if (is_int(dt)) {
    int64_t acc = static_cast<int64_t>(input_value(dt, op, 0, i));
    for (int r = 1; r < n; ++r) {
      int64_t x = static_cast<int64_t>(input_value(dt, op, r, i));
      switch (op) {
        case ReduceOp::SUM:
          acc = wrap(dt, acc + x);
          break;
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
          acc = wrap(dt, acc & x);
          break;
        case ReduceOp::BOR:
          acc = wrap(dt, acc | x);
          break;
        case ReduceOp::BXOR:
          acc = wrap(dt, acc ^ x);
          break;
        default:
          break;
      }
    }
    return static_cast<double>(acc);
  }
  double acc = input_value(dt, op, 0, i) * (op == ReduceOp::PREMUL_SUM ? premul : 1.0);
  for (int r = 1; r < n; ++r) {
    double x = input_value(dt, op, r, i);
    switch (op) {
      case ReduceOp::SUM:
      case ReduceOp::AVG:
        acc += x;
        break;
      case ReduceOp::PREMUL_SUM:
        acc += premul * x;
        break;
      case ReduceOp::PRODUCT:
        acc *= x;
        break;
      case ReduceOp::MIN:
        acc = std::min(acc, x);
        break;
      case ReduceOp::MAX:
        acc = std::max(acc, x);
        break;
      default:
        break;
    }
  }
  if (op == ReduceOp::AVG) acc /= n;
  return acc;
}

std::string check_reduced(DType dt, ReduceOp op, double premul, int n, const void* got,
                          size_t first, size_t count) {
  // Tolerance: one rounding per merge in the dtype (float16/bfloat16 accumulate in their own
  // width between merges), relative to the magnitude, plus an absolute floor.
  double rel = 0;
  switch (dt) {
    case DType::Float16:
      rel = 2e-3 * n;
      break;
    case DType::BFloat16:
      rel = 1.6e-2 * n;
      break;
    case DType::Float32:
      rel = 1e-6 * n;
      break;
    case DType::Float64:
      rel = 1e-14 * n;
      break;
    default:
      break;
  }
  for (size_t k = 0; k < count; ++k) {
    double want = expected_value(dt, op, premul, n, first + k);
    double have = read_elem(dt, got, k);
    bool ok =
        is_int(dt) ? want == have : std::fabs(want - have) <= rel * std::max(1.0, std::fabs(want));
    if (!ok) {
      std::ostringstream os;
      os << "element " << first + k << ": got " << have << ", want " << want;
      return os.str();
    }
  }
  return "";
}

}  // namespace tpcomm::shm_test
