#include <cstring>
#include <string>

#include "tpcomm/types.hpp"
#include "tpcomm/version.hpp"

namespace tpcomm {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8: return 1;
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Int32:
    case DType::Float32: return 4;
    case DType::Int64:
    case DType::Float64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "uint8";
    case DType::Int8: return "int8";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
  }
  return "unknown";
}

std::optional<DType> parse_dtype(std::string_view name) {
  struct Alias {
    const char* name;
    DType t;
  };
  static const Alias kAliases[] = {
      {"bool", DType::Bool},         {"uint8", DType::UInt8},     {"u8", DType::UInt8},
      {"byte", DType::UInt8},        {"int8", DType::Int8},       {"i8", DType::Int8},
      {"char", DType::Int8},         {"int16", DType::Int16},     {"short", DType::Int16},
      {"i16", DType::Int16},         {"int32", DType::Int32},     {"int", DType::Int32},
      {"i32", DType::Int32},         {"int64", DType::Int64},     {"long", DType::Int64},
      {"i64", DType::Int64},         {"float16", DType::Float16}, {"half", DType::Float16},
      {"fp16", DType::Float16},      {"f16", DType::Float16},     {"bfloat16", DType::BFloat16},
      {"bf16", DType::BFloat16},     {"float32", DType::Float32}, {"float", DType::Float32},
      {"fp32", DType::Float32},      {"f32", DType::Float32},     {"float64", DType::Float64},
      {"double", DType::Float64},    {"fp64", DType::Float64},    {"f64", DType::Float64},
  };
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const Alias& a : kAliases)
    if (lower == a.name) return a.t;
  return std::nullopt;
}

bool is_floating(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 ||
         t == DType::Float64;
}

// float -> binary16, round to nearest even, with subnormals, infinities and NaN.
Half::Half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan
    bits = static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
    return;
  }
  if (absx >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    bits = static_cast<uint16_t>(sign | 0x7c00u);
    return;
  }
  if (absx < 0x38800000u) {  // subnormal half (or zero)
    // Scale so that the value is an integer count of 2^-24 units, rounding to nearest even.
    float af;
    std::memcpy(&af, &absx, 4);
    float scaled = af * 16777216.0f;  // 2^24
    uint32_t m = static_cast<uint32_t>(scaled);
    float rem = scaled - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    bits = static_cast<uint16_t>(sign | m);
    return;
  }
  uint32_t mant = absx & 0x7fffffu;
  uint32_t exp = (absx >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into exponent: fine
  bits = static_cast<uint16_t>(sign | h);
}

Half::operator float() const {
  uint32_t sign = (static_cast<uint32_t>(bits) & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalize
      float f = static_cast<float>(mant) / 16777216.0f;
      std::memcpy(&x, &f, 4);
      x |= sign;
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

BFloat16::BFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it quiet
    bits = static_cast<uint16_t>((x >> 16) | 0x40u);
    return;
  }
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  bits = static_cast<uint16_t>((x + rounding) >> 16);
}

BFloat16::operator float() const {
  uint32_t x = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

std::string Device::str() const {
  return type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(index);
}

std::string Tensor::str() const {
  return std::string(dtype_name(dtype)) + "[" + std::to_string(numel) + "] on " + device.str();
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return "sum";
    case ReduceOp::PRODUCT: return "prod";
    case ReduceOp::MIN: return "min";
    case ReduceOp::MAX: return "max";
    case ReduceOp::AVG: return "avg";
    case ReduceOp::BAND: return "band";
    case ReduceOp::BOR: return "bor";
    case ReduceOp::BXOR: return "bxor";
    case ReduceOp::PREMUL_SUM: return "premul_sum";
  }
  return "unknown";
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  std::string s(name);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "sum") return ReduceOp::SUM;
  if (s == "prod" || s == "product") return ReduceOp::PRODUCT;
  if (s == "min") return ReduceOp::MIN;
  if (s == "max") return ReduceOp::MAX;
  if (s == "avg") return ReduceOp::AVG;
  if (s == "band") return ReduceOp::BAND;
  if (s == "bor") return ReduceOp::BOR;
  if (s == "bxor") return ReduceOp::BXOR;
  if (s == "premul_sum" || s == "premulsum") return ReduceOp::PREMUL_SUM;
  return std::nullopt;
}

bool reduce_op_supports(ReduceOp op, DType t) {
  if (op == ReduceOp::BAND || op == ReduceOp::BOR || op == ReduceOp::BXOR) return !is_floating(t);
  // AVG and PREMUL_SUM are defined on floating types only (as torch's backends).
  if (op == ReduceOp::AVG || op == ReduceOp::PREMUL_SUM) return is_floating(t);
  return true;
}

const char* version() { return TPCOMM_VERSION_STRING; }

const char* build_options() {
  static const std::string opts = std::string(TPCOMM_HAVE_UCX ? "ucx" : "-ucx") +
                                  (TPCOMM_HAVE_IBVERBS ? " ibverbs" : " -ibverbs") +
                                  // The CUDA driver, memory kinds and GPU kernels; CUDA
                                  // tensors are not moved yet (docs/gpu.md).
                                  (TPCOMM_HAVE_CUDA ? " cuda-driver" : " -cuda") +
                                  // No NCCL engine is built yet, whether nccl.h was found or not.
                                  " -nccl";
  return opts.c_str();
}

}  // namespace tpcomm
