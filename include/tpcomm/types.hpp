// Core value types of the public API: element types, devices, tensors and reduction ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tpcomm {

/// Element type of a tensor. The order is part of the wire format: append only.
enum class DType : uint8_t {
  Bool,
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
};

/// Number of DType values (for tables indexed by dtype).
inline constexpr int kNumDTypes = 10;

/// Size of one element in bytes.
size_t dtype_size(DType t);
/// Lower-case name as torch prints it ("float32", "bfloat16", ...).
const char* dtype_name(DType t);
/// Parses a name ("float32", "float", "fp32", "f32", "int64", "bf16", ...); nullopt if unknown.
std::optional<DType> parse_dtype(std::string_view name);
/// True for Float16, BFloat16, Float32 and Float64.
bool is_floating(DType t);

/// IEEE 754 binary16 value stored as its bits; converts through float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  explicit operator float() const;
  static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

/// bfloat16 value stored as its bits (the upper half of a float32); round to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f);
  explicit operator float() const;
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

/// Maps a C++ element type to its DType at compile time.
template <class T>
struct DTypeOf;
template <> struct DTypeOf<bool> { static constexpr DType value = DType::Bool; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::Int8; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::Int16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::Float16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct DTypeOf<float> { static constexpr DType value = DType::Float32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::Float64; };

/// Kind of memory a buffer lives in.
enum class DeviceType : uint8_t { CPU, CUDA };

/// Where a tensor's memory lives: host memory, or the CUDA device `index`.
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  /// "cpu" or "cuda:N".
  std::string str() const;
  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index) { return {DeviceType::CUDA, index}; }
  friend bool operator==(const Device&, const Device&) = default;
};

/// A non-owning view of one contiguous buffer of `numel` elements of `dtype`.
/// tpcomm never allocates or frees the memory behind a Tensor; the caller keeps it alive
/// until the operation that uses it has completed (Work::wait).
struct Tensor {
  void* data = nullptr;
  int64_t numel = 0;
  DType dtype = DType::Float32;
  Device device = Device::cpu();

  /// numel * element size.
  size_t nbytes() const { return static_cast<size_t>(numel) * dtype_size(dtype); }
  size_t element_size() const { return dtype_size(dtype); }
  /// "float32[1024] on cpu"
  std::string str() const;

  /// A view of the whole vector (its storage must not be reallocated while in use).
  template <class T>
  static Tensor of(std::vector<T>& v) {
    static_assert(!std::is_same_v<T, bool>, "std::vector<bool> is not contiguous; use uint8_t");
    return of(v.data(), static_cast<int64_t>(v.size()));
  }
  /// A view of `n` elements starting at `ptr`.
  template <class T>
  static Tensor of(T* ptr, int64_t n, Device device = Device::cpu()) {
    return Tensor{static_cast<void*>(ptr), n, DTypeOf<std::remove_cv_t<T>>::value, device};
  }
  /// A view of raw memory with an explicit dtype.
  static Tensor raw(void* ptr, int64_t n, DType t, Device device = Device::cpu()) {
    return Tensor{ptr, n, t, device};
  }
};

/// Reduction applied by all_reduce, reduce and reduce_scatter. AVG divides by the group
/// size; PREMUL_SUM multiplies each input by a scale factor (given in the call's options)
/// before summing; BAND, BOR and BXOR are defined for integer and bool types only.
enum class ReduceOp : uint8_t { SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR, PREMUL_SUM };

/// "sum", "prod", "min", "max", "avg", "band", "bor", "bxor", "premul_sum".
const char* reduce_op_name(ReduceOp op);
/// Parses the names above (and "product"); nullopt if unknown.
std::optional<ReduceOp> parse_reduce_op(std::string_view name);
/// True when `op` is defined on `t`: bitwise ops take integer and bool types only, AVG and
/// PREMUL_SUM floating types only.
bool reduce_op_supports(ReduceOp op, DType t);

}  // namespace tpcomm
