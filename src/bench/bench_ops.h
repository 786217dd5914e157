// tpbench's descriptor table: per operation its name, how a size in bytes maps to element
// counts, the nccl-tests bus-bandwidth factor (as nccl-tests' doc/PERFORMANCE.md defines it),
// whether it reduces, has a root or an in-place form, and how its buffers are initialised and
// checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "collectives/types.h"
#include "tpcomm/types.hpp"

namespace tpcomm::bench {

/// What one timed call needs.
struct Shape {
  size_t size_bytes = 0;  ///< S as nccl-tests prints it (after rounding to the group size)
  size_t count = 0;       ///< elements as printed (S / element size)
  size_t send_elems = 0;  ///< this rank's send buffer
  size_t recv_elems = 0;  ///< this rank's receive buffer
  size_t param = 0;       ///< the per-rank count passed to the operation
};

struct OpDesc {
  const char* name;                  ///< "allreduce", ..., "sendrecv"
  std::optional<coll::CollOp> coll;  ///< nullopt for sendrecv
  bool reduces;
  bool rooted;
  bool in_place;  ///< has an in-place form
  /// busbw = algbw x factor(n).
  double (*bus_factor)(int n);
  /// Buffers for a size of `bytes` (rounded down to what the operation can split).
  Shape (*shape)(size_t bytes, size_t esize, int n, int rank, int root);
  /// The ProcessGroup method it stands for ("all_reduce", ...): the collective runs under
  /// that name (its signature's op code, the flight recorder), as a call of the method would.
  const char* api;
};

/// Every operation, in the order `-o all` runs them.
std::span<const OpDesc> bench_ops();
/// The descriptor called `name` (underscores ignored), or nullptr.
const OpDesc* find_bench_op(const std::string& name);
/// "allreduce, broadcast, ..." for messages.
std::string bench_op_names();

/// The value rank `rank` puts at element i of its send buffer (small integers, so that sums
/// and products stay exact or nearly so in every dtype).
double init_value(ReduceOp op, int rank, size_t i);
/// The reduction of init_value over n ranks at element i, as the dtype stores it.
double expected_reduction(DType dt, ReduceOp op, double scale, int n, size_t i);

/// Writes value v into element i of a buffer of dtype dt; reads one back as a double.
void store_value(DType dt, void* buf, size_t i, double v);
double load_value(DType dt, const void* buf, size_t i);
/// True when got matches want for dtype dt (exact for integers, relative tolerance for
/// floating types: 1e-2 for float16 and bfloat16, 1e-5 for float32, 1e-12 for float64).
bool value_matches(DType dt, double got, double want);

}  // namespace tpcomm::bench
