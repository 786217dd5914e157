// Shared helpers of the collective tests (see coll_test_util.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "collectives/coll_test_util.h"
#include "collectives/local_comm.h"

namespace tpcomm::coll::testing {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hash(uint64_t seed, int rank, size_t i) {
  return mix(seed * 0x100000001b3ull ^ (static_cast<uint64_t>(rank) << 40) ^ mix(i));
}

double unit_roundoff_x2(DType dt) {
  switch (dt) {
    case DType::Float16:
      return std::ldexp(1.0, -10);
    case DType::BFloat16:
      return std::ldexp(1.0, -7);
    case DType::Float32:
      return std::ldexp(1.0, -23);
    default:
      return std::ldexp(1.0, -52);
  }
}

void store_float(DType dt, uint8_t* p, size_t i, double v) {
  switch (dt) {
    case DType::Float16: {
      uint16_t b = Half(static_cast<float>(v)).bits;
      std::memcpy(p + 2 * i, &b, 2);
      break;
    }
    case DType::BFloat16: {
      uint16_t b = BFloat16(static_cast<float>(v)).bits;
      std::memcpy(p + 2 * i, &b, 2);
      break;
    }
    case DType::Float32: {
      float f = static_cast<float>(v);
      std::memcpy(p + 4 * i, &f, 4);
      break;
    }
    default:
      std::memcpy(p + 8 * i, &v, 8);
      break;
  }
}

double load_float(DType dt, const uint8_t* p, size_t i) {
  switch (dt) {
    case DType::Float16: {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return static_cast<float>(Half::from_bits(b));
    }
    case DType::BFloat16: {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return static_cast<float>(BFloat16::from_bits(b));
    }
    case DType::Float32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      return d;
    }
  }
}

uint64_t load_bits(DType dt, const uint8_t* p, size_t i) {
  uint64_t v = 0;
  size_t es = dtype_size(dt);
  std::memcpy(&v, p + es * i, es);
  return v;
}

uint64_t mask_of(DType dt) {
  size_t es = dtype_size(dt);
  return es == 8 ? ~0ull : ((1ull << (8 * es)) - 1);
}

int64_t as_signed(DType dt, uint64_t bits) {
  switch (dt) {
    case DType::Int8:
      return static_cast<int8_t>(bits);
    case DType::Int16:
      return static_cast<int16_t>(bits);
    case DType::Int32:
      return static_cast<int32_t>(bits);
    case DType::Int64:
      return static_cast<int64_t>(bits);
    default:
      return static_cast<int64_t>(bits);  // UInt8, Bool: unsigned
  }
}

}  // namespace

std::vector<DType> all_dtypes() {
  std::vector<DType> v;
  for (int i = 0; i < kNumDTypes; ++i) v.push_back(static_cast<DType>(i));
  return v;
}

std::vector<std::pair<DType, ReduceOp>> reduce_cases() {
  std::vector<std::pair<DType, ReduceOp>> v;
  for (DType dt : all_dtypes()) {
    for (int o = 0; o <= static_cast<int>(ReduceOp::PREMUL_SUM); ++o) {
      ReduceOp op = static_cast<ReduceOp>(o);
      if (reduce_op_supports(op, dt)) v.emplace_back(dt, op);
    }
  }
  return v;
}

std::vector<uint8_t> make_input(DType dt, ReduceOp op, int rank, size_t count, uint64_t seed) {
  std::vector<uint8_t> out(count * dtype_size(dt));
  for (size_t i = 0; i < count; ++i) {
    uint64_t h = hash(seed, rank, i);
    if (is_floating(dt)) {
      double v;
      if (op == ReduceOp::PRODUCT) {
        v = 0.5 + static_cast<double>(h % 1001) / 1000.0;
      } else if (op == ReduceOp::MIN || op == ReduceOp::MAX) {
        v = (static_cast<double>(h % 20001) - 10000.0) / 100.0;
      } else {
        v = (static_cast<double>(h % 2001) - 1000.0) / 512.0;
      }
      store_float(dt, out.data(), i, v);
    } else if (dt == DType::Bool) {
      bool b;
      if (op == ReduceOp::BAND || op == ReduceOp::PRODUCT || op == ReduceOp::MIN) {
        b = h % 8 != 0;
      } else if (op == ReduceOp::BXOR) {
        b = h & 1;
      } else {
        b = h % 8 == 0;
      }
      out[i] = b ? 1 : 0;
    } else {
      std::memcpy(out.data() + i * dtype_size(dt), &h, dtype_size(dt));
    }
  }
  return out;
}

std::vector<uint8_t> make_bytes(int rank, size_t bytes, uint64_t seed) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t h = hash(seed, rank, i);
    std::memcpy(out.data() + i, &h, std::min<size_t>(8, bytes - i));
  }
  return out;
}

Expected reference(DType dt, ReduceOp op, double scale,
                   const std::vector<std::vector<uint8_t>>& inputs, size_t count) {
  Expected e;
  e.dtype = dt;
  const int n = static_cast<int>(inputs.size());
  if (is_floating(dt)) {
    const double u = unit_roundoff_x2(dt);
    e.value.resize(count);
    e.tol.resize(count);
    for (size_t i = 0; i < count; ++i) {
      double acc = 0, mag = 0;
      for (int r = 0; r < n; ++r) {
        double x = load_float(dt, inputs[static_cast<size_t>(r)].data(), i);
        if (op == ReduceOp::PREMUL_SUM) x *= scale;
        if (r == 0) {
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
        mag += std::fabs(x);
      }
      double tol = 0;
      if (op == ReduceOp::SUM || op == ReduceOp::PREMUL_SUM) tol = (n + 2) * u * mag;
      if (op == ReduceOp::AVG) {
        acc /= n;
        tol = (n + 2) * u * mag / n;
      }
      if (op == ReduceOp::PRODUCT) tol = (n + 2) * u * std::fabs(acc);
      e.value[i] = acc;
      e.tol[i] = tol;
    }
    return e;
  }
  e.bits.resize(count);
  const uint64_t mask = mask_of(dt);
  for (size_t i = 0; i < count; ++i) {
    uint64_t acc = 0;
    for (int r = 0; r < n; ++r) {
      uint64_t x = load_bits(dt, inputs[static_cast<size_t>(r)].data(), i) & mask;
      if (dt == DType::Bool) x = x != 0;
      if (r == 0) {
        acc = x;
        continue;
      }
      if (dt == DType::Bool) {
        switch (op) {
          case ReduceOp::SUM:
          case ReduceOp::MAX:
          case ReduceOp::BOR:
            acc = acc | x;
            break;
          case ReduceOp::PRODUCT:
          case ReduceOp::MIN:
          case ReduceOp::BAND:
            acc = acc & x;
            break;
          default:
            acc = acc ^ x;
            break;
        }
        continue;
      }
      switch (op) {
        case ReduceOp::SUM:
          acc = acc + x;
          break;
        case ReduceOp::PRODUCT:
          acc = acc * x;
          break;
        case ReduceOp::MIN:
          acc = as_signed(dt, x) < as_signed(dt, acc) ? x : acc;
          break;
        case ReduceOp::MAX:
          acc = as_signed(dt, x) > as_signed(dt, acc) ? x : acc;
          break;
        case ReduceOp::BAND:
          acc = acc & x;
          break;
        case ReduceOp::BOR:
          acc = acc | x;
          break;
        default:
          acc = acc ^ x;
          break;
      }
      acc &= mask;
    }
    e.bits[i] = acc & mask;
  }
  return e;
}

std::string compare(const Expected& e, const void* got, size_t offset, size_t count) {
  const uint8_t* g = static_cast<const uint8_t*>(got);
  for (size_t i = 0; i < count; ++i) {
    if (is_floating(e.dtype)) {
      double v = load_float(e.dtype, g, i), want = e.value[offset + i];
      if (std::isnan(v) != std::isnan(want) ||
          (!std::isnan(v) && !(std::fabs(v - want) <= e.tol[offset + i]))) {
        std::ostringstream os;
        os.precision(17);
        os << dtype_name(e.dtype) << " element " << offset + i << ": got " << v << ", want " << want
           << " within " << e.tol[offset + i];
        return os.str();
      }
    } else {
      uint64_t v = load_bits(e.dtype, g, i) & mask_of(e.dtype);
      if (v != e.bits[offset + i]) {
        std::ostringstream os;
        os << dtype_name(e.dtype) << " element " << offset + i << ": got bits " << v << ", want "
           << e.bits[offset + i];
        return os.str();
      }
    }
  }
  return "";
}

Tensor tensor_of(std::vector<uint8_t>& v, DType dt) {
  return Tensor::raw(v.data(), static_cast<int64_t>(v.size() / dtype_size(dt)), dt);
}

void Failures::add(int rank, const std::string& what) {
  std::lock_guard<std::mutex> lk(mu_);
  if (items_.size() < 10) items_.push_back("rank " + std::to_string(rank) + ": " + what);
}

std::vector<std::string> Failures::list() const {
  std::lock_guard<std::mutex> lk(mu_);
  return items_;
}

void report(const Failures& f) {
  for (const std::string& s : f.list()) ADD_FAILURE() << s;
}

void run_ranks(int n, const std::function<void(CollComm&)>& fn) {
  LocalWorld::Options o;
  o.timeout = std::chrono::milliseconds(60000);
  LocalWorld world(n, o);
  world.run(fn);
}

}  // namespace tpcomm::coll::testing
