// Entry points of the reduction kernels: argument checks, the choice of ISA path
// (TPCOMM_REDUCE_ISA, CPUID) and the dispatch into the path's kernel table.
#include "core/reduce.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "core/config.h"
#include "core/log.h"
#include "core/reduce_table.h"
#include "tpcomm/error.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

namespace tpcomm::kernels {
namespace {

using detail::KernelTable;

// Upper-case names as torch spells them in ReduceOp.X.
const char* op_upper(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
      return "SUM";
    case ReduceOp::PRODUCT:
      return "PRODUCT";
    case ReduceOp::MIN:
      return "MIN";
    case ReduceOp::MAX:
      return "MAX";
    case ReduceOp::AVG:
      return "AVG";
    case ReduceOp::BAND:
      return "BAND";
    case ReduceOp::BOR:
      return "BOR";
    case ReduceOp::BXOR:
      return "BXOR";
    case ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
  }
  return "?";
}

bool valid_dtype(DType t) { return static_cast<unsigned>(t) < static_cast<unsigned>(kNumDTypes); }
bool valid_op(ReduceOp op) { return static_cast<unsigned>(op) < detail::kNumOps; }

void check_dtype(DType t, const char* what) {
  if (!valid_dtype(t)) {
    throw InvalidArgument(std::string(what) + ": unknown DType value " +
                          std::to_string(static_cast<int>(t)));
  }
}

void check_floating(DType t, const char* what) {
  check_dtype(t, what);
  if (!is_floating(t)) {
    throw InvalidArgument(std::string(what) + " is not defined on " + dtype_name(t) +
                          ": it takes floating-point tensors (float16, bfloat16, float32, "
                          "float64)");
  }
}

void check_pointers(const void* dst, const void* a, const void* b, size_t count, const char* what) {
  if (count > 0 && (dst == nullptr || a == nullptr || b == nullptr)) {
    throw InvalidArgument(std::string(what) + ": null buffer for " + std::to_string(count) +
                          " elements");
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// F16C (CPUID leaf 1, ECX bit 29), AVX512-FP16 (leaf 7, EDX bit 23) and AVX512-BF16 (leaf 7
// subleaf 1, EAX bit 5) straight from CPUID: older compilers' __builtin_cpu_supports lacks them.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  return (ecx >> 29) & 1u;
}
bool cpu_has_avx512fp16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  return (edx >> 23) & 1u;
}
bool cpu_has_avx512bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
  return (eax >> 5) & 1u;
}
#endif

bool cpu_has(ReduceIsa isa) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  switch (isa) {
    case ReduceIsa::Scalar:
      return true;
    case ReduceIsa::Avx2:
      return __builtin_cpu_supports("avx2") && cpu_has_f16c();
    case ReduceIsa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             cpu_has_f16c();
    case ReduceIsa::Avx512Fp16:
      return cpu_has(ReduceIsa::Avx512) && cpu_has_avx512fp16() && cpu_has_avx512bf16();
  }
  return false;
#else
  return isa == ReduceIsa::Scalar;
#endif
}

// The AVX-512 table with the AVX512-FP16/BF16 entries laid over it (built once).
const KernelTable* merged_fp16_table() {
  static const KernelTable* merged = []() -> const KernelTable* {
    const KernelTable* base = detail::avx512_table();
    const KernelTable* over = detail::avx512fp16_table();
    if (base == nullptr || over == nullptr) return nullptr;
    static KernelTable t = *base;
    for (int d = 0; d < kNumDTypes; ++d) {
      for (int o = 0; o < detail::kNumOps; ++o) {
        if (over->binary[d][o] != nullptr) t.binary[d][o] = over->binary[d][o];
      }
      if (over->mul[d] != nullptr) t.mul[d] = over->mul[d];
      if (over->div[d] != nullptr) t.div[d] = over->div[d];
    }
    return &t;
  }();
  return merged;
}

const KernelTable* table_of(ReduceIsa isa) {
  switch (isa) {
    case ReduceIsa::Scalar:
      return detail::scalar_table();
    case ReduceIsa::Avx2:
      return detail::avx2_table();
    case ReduceIsa::Avx512:
      return detail::avx512_table();
    case ReduceIsa::Avx512Fp16:
      return merged_fp16_table();
  }
  return nullptr;
}

ReduceIsa widest_supported() {
  if (isa_supported(ReduceIsa::Avx512Fp16)) return ReduceIsa::Avx512Fp16;
  if (isa_supported(ReduceIsa::Avx512)) return ReduceIsa::Avx512;
  if (isa_supported(ReduceIsa::Avx2)) return ReduceIsa::Avx2;
  return ReduceIsa::Scalar;
}

// Resolved selection; -1 until first use.
std::atomic<int> g_isa{-1};
std::atomic<size_t> g_nt_threshold{std::numeric_limits<size_t>::max()};

ReduceIsa resolve() {
  std::string want = config::get_enum("TPCOMM_REDUCE_ISA");
  ReduceIsa isa = widest_supported();
  if (want != "auto") {
    ReduceIsa forced = want == "avx512fp16" ? ReduceIsa::Avx512Fp16
                       : want == "avx512"   ? ReduceIsa::Avx512
                       : want == "avx2"     ? ReduceIsa::Avx2
                                            : ReduceIsa::Scalar;
    if (isa_supported(forced)) {
      isa = forced;
    } else {
      TPLOG(WARN, COLL) << "TPCOMM_REDUCE_ISA=" << want << " but this "
                        << (table_of(forced) ? "CPU lacks it" : "build does not contain it")
                        << "; using " << isa_name(isa) << " reduction kernels";
    }
  }
  uint64_t nt = config::get_size("TPCOMM_REDUCE_NT_THRESHOLD");
  g_nt_threshold.store(nt == 0 ? std::numeric_limits<size_t>::max() : static_cast<size_t>(nt),
                       std::memory_order_relaxed);
  g_isa.store(static_cast<int>(isa), std::memory_order_release);
  TPLOG(INFO, COLL) << "reduction kernels: " << isa_name(isa) << " (TPCOMM_REDUCE_ISA=" << want
                    << ")";
  return isa;
}

const KernelTable& checked_table(ReduceIsa isa) {
  if (!isa_supported(isa)) {
    throw NotSupportedError(std::string("reduction kernels: the ") + isa_name(isa) +
                            " path is not available on this " + (table_of(isa) ? "CPU" : "build") +
                            "; use scalar, or auto");
  }
  return *table_of(isa);
}

}  // namespace

const char* isa_name(ReduceIsa isa) {
  switch (isa) {
    case ReduceIsa::Scalar:
      return "scalar";
    case ReduceIsa::Avx2:
      return "avx2";
    case ReduceIsa::Avx512:
      return "avx512";
    case ReduceIsa::Avx512Fp16:
      return "avx512fp16";
  }
  return "unknown";
}

bool isa_supported(ReduceIsa isa) {
  // Probed once: CPUID traps to the hypervisor in a VM (tens of microseconds per call).
  static const bool kSupported[kNumReduceIsas] = {
      table_of(ReduceIsa::Scalar) != nullptr && cpu_has(ReduceIsa::Scalar),
      table_of(ReduceIsa::Avx2) != nullptr && cpu_has(ReduceIsa::Avx2),
      table_of(ReduceIsa::Avx512) != nullptr && cpu_has(ReduceIsa::Avx512),
      table_of(ReduceIsa::Avx512Fp16) != nullptr && cpu_has(ReduceIsa::Avx512Fp16)};
  auto i = static_cast<unsigned>(isa);
  return i < static_cast<unsigned>(kNumReduceIsas) && kSupported[i];
}

ReduceIsa active_isa() {
  int v = g_isa.load(std::memory_order_acquire);
  if (v >= 0) return static_cast<ReduceIsa>(v);
  return resolve();
}

ReduceIsa reload_isa() { return resolve(); }

size_t nt_threshold() {
  active_isa();
  return g_nt_threshold.load(std::memory_order_relaxed);
}

void check_reduce_op(ReduceOp op, DType dtype) {
  if (!valid_op(op)) {
    throw InvalidArgument("reduce: unknown ReduceOp value " + std::to_string(static_cast<int>(op)));
  }
  check_dtype(dtype, "reduce");
  if (reduce_op_supports(op, dtype)) return;
  std::string head = std::string(op_upper(op)) + " is not defined on " + dtype_name(dtype) + ": ";
  switch (op) {
    case ReduceOp::BAND:
    case ReduceOp::BOR:
    case ReduceOp::BXOR:
      throw InvalidArgument(head + "bitwise reductions take integer or bool tensors");
    case ReduceOp::AVG:
      throw InvalidArgument(head +
                            "averaging takes floating-point tensors (float16, bfloat16, float32, "
                            "float64); use SUM and divide, or convert to a floating type first");
    case ReduceOp::PREMUL_SUM:
      throw InvalidArgument(head +
                            "a pre-multiplied sum takes floating-point tensors (float16, "
                            "bfloat16, float32, float64)");
    default:
      throw InvalidArgument(head + "this combination is not supported");
  }
}

void reduce2_on(ReduceIsa isa, void* dst, const void* a, const void* b, size_t count, DType dtype,
                ReduceOp op, double premul_scale, size_t nt_threshold) {
  check_reduce_op(op, dtype);
  check_pointers(dst, a, b, count, "reduce");
  const KernelTable& t = checked_table(isa);
  if (count == 0) return;
  detail::BinaryFn fn = t.binary[static_cast<int>(dtype)][static_cast<int>(op)];
  // Streaming stores only pay off for a fresh output larger than the caches would keep; an
  // in-place result has just been read into the cache anyway.
  bool nt = dst != a && dst != b && count * dtype_size(dtype) >= nt_threshold;
  fn(dst, a, b, count, premul_scale, nt);
}

void scale_on(ReduceIsa isa, void* dst, const void* src, size_t count, DType dtype, double factor) {
  check_floating(dtype, "scale");
  check_pointers(dst, src, src, count, "scale");
  const KernelTable& t = checked_table(isa);
  if (count == 0) return;
  t.mul[static_cast<int>(dtype)](dst, src, count, factor, false);
}

void finish_avg_on(ReduceIsa isa, void* dst, size_t count, DType dtype, int64_t n) {
  check_dtype(dtype, "AVG");
  if (!is_floating(dtype)) check_reduce_op(ReduceOp::AVG, dtype);
  if (n <= 0) {
    throw InvalidArgument("AVG: the number of contributions must be positive, got " +
                          std::to_string(n));
  }
  check_pointers(dst, dst, dst, count, "AVG");
  const KernelTable& t = checked_table(isa);
  if (count == 0 || n == 1) return;
  t.div[static_cast<int>(dtype)](dst, dst, count, static_cast<double>(n), false);
}

void reduce2(void* dst, const void* a, const void* b, size_t count, DType dtype, ReduceOp op,
             double premul_scale) {
  reduce2_on(active_isa(), dst, a, b, count, dtype, op, premul_scale, nt_threshold());
}

void reduce_into(void* dst, const void* src, size_t count, DType dtype, ReduceOp op,
                 double premul_scale) {
  reduce2_on(active_isa(), dst, dst, src, count, dtype, op, premul_scale,
             std::numeric_limits<size_t>::max());
}

void scale(void* dst, const void* src, size_t count, DType dtype, double factor) {
  scale_on(active_isa(), dst, src, count, dtype, factor);
}

void scale_into(void* dst, size_t count, DType dtype, double factor) {
  scale_on(active_isa(), dst, dst, count, dtype, factor);
}

void finish_avg(void* dst, size_t count, DType dtype, int64_t n) {
  finish_avg_on(active_isa(), dst, count, dtype, n);
}

}  // namespace tpcomm::kernels
