// Copies whose destination bypasses the caches (non-temporal stores): for large results that
// the caller will not read back soon, they avoid the read-for-ownership of every destination
// line and leave the caches to the data still in use.
#pragma once

#include <cstddef>

namespace tpcomm {

/// Copies `bytes` from `src` to `dst` (non-overlapping). With `stream`, blocks of 4 KiB and
/// more go through streaming stores (AVX-512 where the reduction kernels use it, else AVX2;
/// then an sfence, so the data
/// is visible to another process before a release store that follows); otherwise memcpy.
void copy_bytes(void* dst, const void* src, size_t bytes, bool stream);

}  // namespace tpcomm
