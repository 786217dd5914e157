// Shared helpers of the process-group collective tests: worlds over a named backend, typed
// buffers (any dtype through bench_ops' store/load), values exact in every tested dtype.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_ops.h"
#include "common/multiproc.h"
#include "pg/coll_run.h"
#include "tpcomm/tpcomm.hpp"

namespace tpcomm::testing {

/// A world over `backend` ("shm", "tcp", "auto").
inline std::shared_ptr<ProcessGroup> make_world(
    RankContext& c, const std::string& backend,
    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  InitOptions o;
  o.backend = backend;
  o.timeout = timeout;
  return ProcessGroup::create(c.store, c.rank, c.world_size, o);
}

/// A typed host buffer of `n` elements.
struct Buf {
  DType dt;
  std::vector<uint8_t> bytes;
  Buf(DType t, size_t n) : dt(t), bytes(n * dtype_size(t)) {}
  size_t size() const { return bytes.size() / dtype_size(dt); }
  Tensor tensor() { return Tensor::raw(bytes.data(), static_cast<int64_t>(size()), dt); }
  /// A view of elements [off, off + n).
  Tensor view(size_t off, size_t n) {
    return Tensor::raw(bytes.data() + off * dtype_size(dt), static_cast<int64_t>(n), dt);
  }
  void set(size_t i, double v) { bench::store_value(dt, bytes.data(), i, v); }
  double get(size_t i) const { return bench::load_value(dt, bytes.data(), i); }
  void fill(double v) {
    for (size_t i = 0; i < size(); ++i) set(i, v);
  }
};

/// Small integers (exact in bfloat16 even summed over 8 ranks).
inline double val(int rank, size_t i) { return static_cast<double>(rank + 1 + (i % 5)); }

/// Index of the first element of `b` that differs from want(i) (beyond the dtype's tolerance),
/// or -1.
template <class F>
long first_wrong(const Buf& b, F want) {
  for (size_t i = 0; i < b.size(); ++i)
    if (!bench::value_matches(b.dt, b.get(i), want(i))) return static_cast<long>(i);
  return -1;
}

/// The algorithm the group's last collective ran.
inline std::string last_algo(ProcessGroup& pg) {
  return ::tpcomm::detail::last_algorithm(pg.state());
}

/// Runs `f` and returns the message of the tpcomm::Error of type E it throws ("" if none, or
/// "<other: ...>" for another exception).
template <class E, class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<other: ") + e.what() + ">";
  }
  return "";
}

}  // namespace tpcomm::testing
