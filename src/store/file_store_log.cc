#include "store/file_store_log.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "store/crc32c.h"
#include "tpcomm/error.hpp"

namespace tpcomm::filestore {
namespace {

constexpr char kFileMagic[8] = {'T', 'P', 'C', 'O', 'M', 'M', 'F', 'S'};

void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

std::string hex32(uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

[[noreturn]] void corrupt(const std::string& path, uint64_t offset, const std::string& what) {
  throw StoreError("FileStore '" + path + "' is corrupt at byte offset " + std::to_string(offset) +
                   ": " + what +
                   ". Something other than a tpcomm writer changed the file (a disk or "
                   "network file system fault, or another program). It cannot be repaired: "
                   "delete the file and restart the job.");
}

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

// Applies one validated payload.
void apply_payload(const uint8_t* p, size_t len, uint64_t offset, const std::string& path,
                   LogState* st) {
  auto bad = [&](const std::string& what) {
    corrupt(path, offset,
            "record payload is malformed (" + what +
                ") although its checksum "
                "matches; it was written by an incompatible program");
  };
  if (len < 5) bad("shorter than its op and count");
  uint8_t op = p[0];
  uint32_t count = get32(p + 1);
  size_t pos = 5;
  if (op < static_cast<uint8_t>(Op::kSet) || op > static_cast<uint8_t>(Op::kMetaSet))
    bad("unknown op " + std::to_string(op));
  for (uint32_t i = 0; i < count; ++i) {
    if (len - pos < 4) bad("entry " + std::to_string(i) + " truncated");
    uint32_t klen = get32(p + pos);
    pos += 4;
    if (len - pos < klen) bad("key of entry " + std::to_string(i) + " overruns the record");
    std::string key(reinterpret_cast<const char*>(p + pos), klen);
    pos += klen;
    if (len - pos < 8) bad("entry " + std::to_string(i) + " truncated");
    uint64_t vlen = get64(p + pos);
    pos += 8;
    if (len - pos < vlen) bad("value of entry " + std::to_string(i) + " overruns the record");
    const uint8_t* v = p + pos;
    pos += vlen;
    switch (static_cast<Op>(op)) {
      case Op::kSet:
        st->data[std::move(key)].assign(v, v + vlen);
        break;
      case Op::kDelete:
        st->data.erase(key);
        break;
      case Op::kAppend: {
        Bytes& cur = st->data[std::move(key)];
        cur.insert(cur.end(), v, v + vlen);
        break;
      }
      case Op::kMetaSet:
        st->meta[std::move(key)].assign(v, v + vlen);
        break;
    }
  }
  if (pos != len) bad(std::to_string(len - pos) + " trailing bytes");
}

}  // namespace

Bytes encode_file_header() {
  Bytes h(kFileHeaderSize);
  std::memcpy(h.data(), kFileMagic, 8);
  put32(h.data() + 8, kVersion);
  put32(h.data() + 12, store_util::crc32c(0, h.data(), 12));
  return h;
}

HeaderStatus check_file_header(const uint8_t* buf, size_t len, const std::string& path) {
  const Bytes want = encode_file_header();
  size_t n = std::min(len, kFileHeaderSize);
  if (n < kFileHeaderSize) {
    if (std::memcmp(buf, want.data(), n) == 0 || all_zero(buf, n)) return HeaderStatus::kIncomplete;
  }
  if (std::memcmp(buf, kFileMagic, std::min<size_t>(n, 8)) != 0) {
    throw StoreError("FileStore: '" + path +
                     "' is not a tpcomm FileStore file (bad magic at byte offset 0). Pass a "
                     "path that does not exist yet (or an empty file); if this is a leftover "
                     "store of an earlier job, delete it and restart the job.");
  }
  if (n < kFileHeaderSize) corrupt(path, 8, "the file header is truncated but not empty");
  uint32_t version = get32(buf + 8);
  if (version != kVersion) {
    throw StoreError("FileStore: '" + path + "' has format version " + std::to_string(version) +
                     " but this tpcomm reads version " + std::to_string(kVersion) +
                     "; every rank must use the same tpcomm. Delete the file and restart the "
                     "job with one tpcomm version.");
  }
  uint32_t crc = get32(buf + 12);
  if (crc != store_util::crc32c(0, buf, 12))
    corrupt(path, 12, "file header checksum " + hex32(crc) + " does not match");
  return HeaderStatus::kValid;
}

void encode_record(Op op, std::span<const std::string> keys, std::span<const Bytes> values,
                   Bytes* out) {
  uint64_t payload = 5;
  for (size_t i = 0; i < keys.size(); ++i)
    payload += 4 + keys[i].size() + 8 + (i < values.size() ? values[i].size() : 0);
  size_t start = out->size();
  out->resize(start + kRecordHeaderSize + payload);
  uint8_t* h = out->data() + start;
  uint8_t* p = h + kRecordHeaderSize;
  p[0] = static_cast<uint8_t>(op);
  put32(p + 1, static_cast<uint32_t>(keys.size()));
  size_t pos = 5;
  for (size_t i = 0; i < keys.size(); ++i) {
    put32(p + pos, static_cast<uint32_t>(keys[i].size()));
    pos += 4;
    std::memcpy(p + pos, keys[i].data(), keys[i].size());
    pos += keys[i].size();
    size_t vlen = i < values.size() ? values[i].size() : 0;
    put64(p + pos, vlen);
    pos += 8;
    if (vlen) std::memcpy(p + pos, values[i].data(), vlen);
    pos += vlen;
  }
  put32(h, kRecordMagic);
  put64(h + 8, payload);
  put32(h + 16, store_util::crc32c(0, p, payload));
  put32(h + 20, 0);
  put32(h + 4, store_util::crc32c(0, h + 8, 16));
}

ParseResult apply_records(const uint8_t* buf, size_t len, uint64_t base, bool at_eof,
                          const std::string& path, LogState* state) {
  ParseResult r;
  while (r.consumed < len) {
    const uint8_t* h = buf + r.consumed;
    size_t left = len - r.consumed;
    uint64_t off = base + r.consumed;
    if (at_eof && all_zero(h, left)) {
      r.needed = left + 1;  // zero fill up to the end: never a complete record
      return r;
    }
    if (left < kRecordHeaderSize) {
      r.needed = kRecordHeaderSize;
      return r;
    }
    uint32_t magic = get32(h);
    if (magic != kRecordMagic)
      corrupt(path, off,
              "bad record magic " + hex32(magic) + " (expected " + hex32(kRecordMagic) + ")");
    uint32_t hcrc = get32(h + 4);
    if (hcrc != store_util::crc32c(0, h + 8, 16))
      corrupt(path, off, "record header checksum " + hex32(hcrc) + " does not match");
    uint64_t plen = get64(h + 8);
    if (plen > kMaxPayload || plen < 5)
      corrupt(path, off, "absurd record length " + std::to_string(plen));
    if (get32(h + 20) != 0) corrupt(path, off, "reserved record field is not zero");
    if (left - kRecordHeaderSize < plen) {
      r.needed = kRecordHeaderSize + plen;
      return r;
    }
    const uint8_t* p = h + kRecordHeaderSize;
    uint32_t pcrc = get32(h + 16);
    if (pcrc != store_util::crc32c(0, p, plen))
      corrupt(path, off, "record payload checksum " + hex32(pcrc) + " does not match");
    apply_payload(p, plen, off, path, state);
    r.consumed += kRecordHeaderSize + plen;
  }
  return r;
}

}  // namespace tpcomm::filestore
