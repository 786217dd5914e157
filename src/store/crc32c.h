// CRC32C (Castagnoli), used to checksum FileStore records. Hardware (SSE4.2) when the CPU has
// it, a table otherwise; both give the same value. Kept here: Debian 12 packages no C/C++
// CRC32C library (no libcrc32c-dev in bookworm; zlib's crc32 is another polynomial).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tpcomm::store_util {

/// Extends `crc` (0 to start) with len bytes of data; returns the new CRC.
uint32_t crc32c(uint32_t crc, const void* data, size_t len);

}  // namespace tpcomm::store_util
