// The on-disk format of FileStore: a header, then an append-only log of checksummed records.
// Pure encode/parse functions (no I/O), so that the format is unit-tested byte by byte.
//
//   file header (16 bytes):   "TPCOMMFS"  u32 version  u32 crc32c(bytes 0..12)
//   record header (24 bytes): u32 magic "TFR1"  u32 crc32c(bytes 8..24)  u64 payload length
//                             u32 crc32c(payload)  u32 reserved (0)
//   payload:                  u8 op  u32 count  count x (u32 klen, key, u64 vlen, value)
//
// All integers are little-endian. A record is written with one pwrite under an exclusive fcntl
// lock, so the only damage a killed writer can leave is an incomplete record at the very end
// (a "torn tail"); readers ignore it and the next writer truncates it. Anything else that does
// not check out is corruption and is reported with the byte offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "tpcomm/store.hpp"

namespace tpcomm::filestore {

inline constexpr size_t kFileHeaderSize = 16;
inline constexpr size_t kRecordHeaderSize = 24;
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kRecordMagic = 0x31524654u;  // "TFR1" in little-endian byte order
/// Payloads above this are rejected as corrupt before any allocation (1 TiB).
inline constexpr uint64_t kMaxPayload = uint64_t{1} << 40;

/// What a record does to the state.
enum class Op : uint8_t {
  kSet = 1,      ///< set every (key, value)
  kDelete = 2,   ///< delete every key (values empty)
  kAppend = 3,   ///< append each value to its key
  kMetaSet = 4,  ///< set internal bookkeeping keys (reference counts), not visible to users
};

/// The state a log describes: user keys, and internal keys kept apart so num_keys() and
/// users never see them.
struct LogState {
  std::map<std::string, Bytes> data;
  std::map<std::string, Bytes> meta;
};

/// The 16-byte file header.
Bytes encode_file_header();

/// Result of checking the first bytes of a file.
enum class HeaderStatus {
  kValid,       ///< a complete, valid header
  kIncomplete,  ///< shorter than a header but a prefix of one (or zeros): a creator died
};
/// Checks the header in buf (the first min(16, file size) bytes of the file). Throws
/// StoreError naming `path` when the bytes are not a tpcomm FileStore header.
HeaderStatus check_file_header(const uint8_t* buf, size_t len, const std::string& path);

/// Appends one record to *out. For kDelete, values may be empty.
void encode_record(Op op, std::span<const std::string> keys, std::span<const Bytes> values,
                   Bytes* out);

/// Result of parsing a stretch of the log.
struct ParseResult {
  /// Bytes of complete, valid records applied.
  size_t consumed = 0;
  /// When parsing stopped before the end of buf: the bytes the next record needs (header
  /// size if its header is incomplete, else header + payload), counted from buf + consumed.
  uint64_t needed = 0;
};

/// Applies the complete records at the start of buf (which begins at file offset `base`) to
/// *state. Stops at the first incomplete record. `at_eof` says buf ends at the end of the
/// file: then a stretch of zero bytes (left by a crashed NFS client) counts as incomplete.
/// Throws StoreError naming path and offset on a corrupt record (the records before it may
/// have been applied: the caller discards *state).
ParseResult apply_records(const uint8_t* buf, size_t len, uint64_t base, bool at_eof,
                          const std::string& path, LogState* state);

}  // namespace tpcomm::filestore
