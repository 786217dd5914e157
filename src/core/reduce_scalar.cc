// The portable path of the reduction kernels: plain element loops, any CPU. It is also the
// reference the vector paths must match bit for bit.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/reduce_table.h"
#include "tpcomm/types.hpp"
//
#include "core/reduce_generic.h"

namespace tpcomm::kernels::detail {
namespace {

struct ScalarIsa {
  static constexpr size_t kVec = 0;
  static constexpr bool kStream = false;
};

constexpr KernelTable kScalarTable = make_table<ScalarIsa>();

}  // namespace

const KernelTable* scalar_table() { return &kScalarTable; }

}  // namespace tpcomm::kernels::detail
