// Single-thread bandwidth of the reduction kernels. Bytes are counted as read + written
// (c = a + b moves 3 x the array size), the same measure as a plain STREAM-style add loop,
// which is included as the baseline (BM_PlainLoopAdd). The GB/s counter is decimal
// (1e9 bytes per second of CPU time).
//
//   bin/reduce_bench                                  # everything
//   bin/reduce_bench --benchmark_filter='Large'       # out-of-cache cases only
//   bin/reduce_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Out-of-place cases use reduce2()'s store policy (streaming stores for outputs of 8 MiB and
// more) unless named _Cached (never streaming) or _Streaming (always).
// Arguments of each case: /isa (0 scalar, 1 avx2, 2 avx512, 3 avx512fp16)/bytes per array.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "core/reduce.h"
#include "tpcomm/types.hpp"

namespace {

using tpcomm::DType;
using tpcomm::ReduceOp;
using tpcomm::kernels::ReduceIsa;

constexpr size_t kNever = std::numeric_limits<size_t>::max();
constexpr int64_t kSmall = 4 << 10;    // per array: stays in L1
constexpr int64_t kLarge = 256 << 20;  // per array: 768 MiB in all, beyond every cache

// One page-aligned, pre-faulted buffer per role, reused across cases of the same size.
struct Buffers {
  size_t bytes = 0;
  uint8_t* a = nullptr;
  uint8_t* b = nullptr;
  uint8_t* c = nullptr;
  void ensure(size_t n) {
    if (n <= bytes) return;
    std::free(a);
    std::free(b);
    std::free(c);
    bytes = n;
    a = static_cast<uint8_t*>(std::aligned_alloc(4096, n));
    b = static_cast<uint8_t*>(std::aligned_alloc(4096, n));
    c = static_cast<uint8_t*>(std::aligned_alloc(4096, n));
    // Small finite values in every dtype (0x3c00 = 1.0 in float16, 0x3c3c.. a small float32).
    std::memset(a, 0x3c, n);
    std::memset(b, 0x3c, n);
    std::memset(c, 0, n);
  }
};

Buffers& buffers() {
  static Buffers b;
  return b;
}

bool set_up(benchmark::State& state, ReduceIsa isa) {
  if (!tpcomm::kernels::isa_supported(isa)) {
    state.SkipWithError((std::string(tpcomm::kernels::isa_name(isa)) + " unavailable").c_str());
    return false;
  }
  state.SetLabel(tpcomm::kernels::isa_name(isa));
  return true;
}

void report(benchmark::State& state, size_t bytes_per_iter) {
  const double total =
      static_cast<double>(bytes_per_iter) * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(total));
  state.counters["GB/s"] = benchmark::Counter(total, benchmark::Counter::kIsRate);
}

// How an out-of-place result is stored.
enum class Stores { kDefault, kCached, kStreaming };

// c = op(a, b) or a = op(a, b) for one dtype. kDefault is what reduce2() does: streaming
// stores from TPCOMM_REDUCE_NT_THRESHOLD (8 MiB) up.
void run_case(benchmark::State& state, DType dtype, ReduceOp op, bool in_place,
              Stores stores = Stores::kDefault) {
  auto isa = static_cast<ReduceIsa>(state.range(0));
  const size_t bytes = static_cast<size_t>(state.range(1));
  if (!set_up(state, isa)) return;
  Buffers& buf = buffers();
  buf.ensure(bytes);
  const size_t count = bytes / tpcomm::dtype_size(dtype);
  uint8_t* dst = in_place ? buf.a : buf.c;
  const size_t nt = stores == Stores::kCached      ? kNever
                    : stores == Stores::kStreaming ? 0
                                                   : tpcomm::kernels::nt_threshold();
  for (auto _ : state) {
    tpcomm::kernels::reduce2_on(isa, dst, buf.a, buf.b, count, dtype, op, 1.0, nt);
    benchmark::ClobberMemory();
  }
  report(state, 3 * bytes);
}

void BM_SumF32(benchmark::State& s) { run_case(s, DType::Float32, ReduceOp::SUM, false); }
void BM_SumF32_Cached(benchmark::State& s) {
  run_case(s, DType::Float32, ReduceOp::SUM, false, Stores::kCached);
}
void BM_SumF32_Streaming(benchmark::State& s) {
  run_case(s, DType::Float32, ReduceOp::SUM, false, Stores::kStreaming);
}
void BM_SumF32_InPlace(benchmark::State& s) { run_case(s, DType::Float32, ReduceOp::SUM, true); }
void BM_SumBF16(benchmark::State& s) { run_case(s, DType::BFloat16, ReduceOp::SUM, false); }
void BM_SumBF16_InPlace(benchmark::State& s) { run_case(s, DType::BFloat16, ReduceOp::SUM, true); }
void BM_SumF16(benchmark::State& s) { run_case(s, DType::Float16, ReduceOp::SUM, false); }
void BM_SumF16_InPlace(benchmark::State& s) { run_case(s, DType::Float16, ReduceOp::SUM, true); }
void BM_SumI32(benchmark::State& s) { run_case(s, DType::Int32, ReduceOp::SUM, false); }
void BM_MaxF32(benchmark::State& s) { run_case(s, DType::Float32, ReduceOp::MAX, false); }
void BM_SumF64(benchmark::State& s) { run_case(s, DType::Float64, ReduceOp::SUM, false); }

// The baseline: a plain loop as a compiler builds it for the default target.
void BM_PlainLoopAdd(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(1));
  Buffers& buf = buffers();
  buf.ensure(bytes);
  const size_t n = bytes / sizeof(float);
  auto* a = reinterpret_cast<const float*>(buf.a);
  auto* b = reinterpret_cast<const float*>(buf.b);
  auto* c = reinterpret_cast<float*>(buf.c);
  state.SetLabel("plain loop");
  for (auto _ : state) {
    for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
    benchmark::ClobberMemory();
  }
  report(state, 3 * bytes);
}

void all_paths(benchmark::internal::Benchmark* b, int64_t bytes) {
  for (int isa = 0; isa < 3; ++isa) b->Args({isa, bytes});
}
// 16-bit floats also on the avx512fp16 path (other dtypes run the same code as avx512 there).
void with_fp16(benchmark::internal::Benchmark* b, int64_t bytes) {
  all_paths(b, bytes);
  b->Args({3, bytes});
}
void large_fast(benchmark::internal::Benchmark* b) {
  b->Args({1, kLarge})->Args({2, kLarge})->Unit(benchmark::kMillisecond);
}
void large_all(benchmark::internal::Benchmark* b) {
  all_paths(b, kLarge);
  b->Unit(benchmark::kMillisecond);
}
void small_all(benchmark::internal::Benchmark* b) { all_paths(b, kSmall); }
void large_f16(benchmark::internal::Benchmark* b) {
  with_fp16(b, kLarge);
  b->Unit(benchmark::kMillisecond);
}
void large_f16_fast(benchmark::internal::Benchmark* b) {
  b->Args({1, kLarge})->Args({2, kLarge})->Args({3, kLarge})->Unit(benchmark::kMillisecond);
}
void small_f16(benchmark::internal::Benchmark* b) { with_fp16(b, kSmall); }

// Out of cache (what a pipelined all_reduce of a big tensor sees).
BENCHMARK(BM_PlainLoopAdd)
    ->Name("Large/PlainLoopAdd")
    ->Args({0, kLarge})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SumF32)->Name("Large/SumF32")->Apply(large_all);
BENCHMARK(BM_SumF32_Cached)->Name("Large/SumF32_Cached")->Apply(large_fast);
BENCHMARK(BM_SumF32_Streaming)->Name("Large/SumF32_Streaming")->Apply(large_fast);
BENCHMARK(BM_SumF32_InPlace)->Name("Large/SumF32_InPlace")->Apply(large_fast);
BENCHMARK(BM_SumBF16)->Name("Large/SumBF16")->Apply(large_f16);
BENCHMARK(BM_SumBF16_InPlace)->Name("Large/SumBF16_InPlace")->Apply(large_f16_fast);
BENCHMARK(BM_SumF16)->Name("Large/SumF16")->Apply(large_f16);
BENCHMARK(BM_SumF16_InPlace)->Name("Large/SumF16_InPlace")->Apply(large_f16_fast);
BENCHMARK(BM_SumI32)->Name("Large/SumI32")->Apply(large_fast);
BENCHMARK(BM_MaxF32)->Name("Large/MaxF32")->Apply(large_fast);
BENCHMARK(BM_SumF64)->Name("Large/SumF64")->Apply(large_fast);

// Cached against streaming stores across sizes (where the streaming threshold belongs).
void sweep(benchmark::internal::Benchmark* b) {
  for (int64_t bytes = 256 << 10; bytes <= kLarge; bytes *= 4) b->Args({2, bytes});
}
BENCHMARK(BM_SumF32_Cached)->Name("Sweep/SumF32_Cached")->Apply(sweep);
BENCHMARK(BM_SumF32_Streaming)->Name("Sweep/SumF32_Streaming")->Apply(sweep);

// In cache (4 KiB per array): the per-call cost and the arithmetic itself.
BENCHMARK(BM_PlainLoopAdd)->Name("Small/PlainLoopAdd")->Args({0, kSmall});
BENCHMARK(BM_SumF32)->Name("Small/SumF32")->Apply(small_all);
BENCHMARK(BM_SumF32_InPlace)->Name("Small/SumF32_InPlace")->Apply(small_all);
BENCHMARK(BM_SumBF16)->Name("Small/SumBF16")->Apply(small_f16);
BENCHMARK(BM_SumF16)->Name("Small/SumF16")->Apply(small_f16);
BENCHMARK(BM_MaxF32)->Name("Small/MaxF32")->Apply(small_all);

}  // namespace

BENCHMARK_MAIN();
