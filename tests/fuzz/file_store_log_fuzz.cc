// Fuzzes the FileStore log parser: any bytes must either parse or raise StoreError, never
// crash, over-read or allocate without bound.
#include <cstdint>
#include <string>
#include <vector>

#include "store/file_store_log.h"
#include "tpcomm/error.hpp"

using tpcomm::Bytes;
namespace fsl = tpcomm::filestore;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    fsl::check_file_header(data, size, "fuzz");
  } catch (const tpcomm::StoreError&) {
  }
  for (bool at_eof : {false, true}) {
    fsl::LogState st;
    try {
      auto r = fsl::apply_records(data, size, 16, at_eof, "fuzz", &st);
      if (r.consumed > size) __builtin_trap();
    } catch (const tpcomm::StoreError&) {
    }
  }
  return 0;
}

extern "C" size_t tpcomm_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  Bytes log;
  std::string k1[] = {"a", "bb"};
  Bytes v1[] = {tpcomm::to_bytes("1"), tpcomm::to_bytes("value")};
  fsl::encode_record(fsl::Op::kSet, k1, v1, &log);
  std::string k2[] = {"a"};
  fsl::encode_record(fsl::Op::kDelete, k2, {}, &log);
  Bytes v3[] = {tpcomm::to_bytes("xyz")};
  fsl::encode_record(fsl::Op::kAppend, k2, v3, &log);
  std::string k4[] = {"refcount"};
  Bytes v4[] = {tpcomm::to_bytes("2")};
  fsl::encode_record(fsl::Op::kMetaSet, k4, v4, &log);
  out->push_back(log);
  out->push_back(fsl::encode_file_header());
  return out->size();
}
