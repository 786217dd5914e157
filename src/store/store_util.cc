#include "store/store_util.h"

#include <charconv>

#include "tpcomm/error.hpp"

namespace tpcomm::store_util {

std::optional<int64_t> parse_counter(const Bytes& value) {
  const char* b = reinterpret_cast<const char*>(value.data());
  const char* e = b + value.size();
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(b, e, v);
  if (value.empty() || ec != std::errc() || ptr != e) return std::nullopt;
  return v;
}

Bytes encode_counter(int64_t v) { return to_bytes(std::to_string(v)); }

int64_t apply_add(std::string_view key, const Bytes* current, int64_t delta) {
  int64_t base = 0;
  if (current) {
    auto v = parse_counter(*current);
    if (!v) {
      throw StoreError("add('" + std::string(key) + "') failed: the key holds " +
                       std::to_string(current->size()) +
                       " bytes that are not a decimal integer; add() only works on counters "
                       "(use another key, or delete_key() it first)");
    }
    base = *v;
  }
  int64_t out;
  if (__builtin_add_overflow(base, delta, &out)) {
    throw StoreError("add('" + std::string(key) + "', " + std::to_string(delta) +
                     ") overflows int64 (value " + std::to_string(base) + ")");
  }
  return out;
}

std::pair<std::optional<Bytes>, Bytes> apply_compare_set(const Bytes* current,
                                                         const Bytes& expected,
                                                         const Bytes& desired) {
  if (!current) {
    if (expected.empty()) return {desired, desired};
    return {std::nullopt, expected};
  }
  if (*current == expected) return {desired, desired};
  return {std::nullopt, *current};
}

std::string missing_keys_message(const std::string& where, const std::vector<std::string>& missing,
                                 size_t total, std::chrono::milliseconds timeout) {
  std::string keys;
  size_t shown = 0;
  for (const std::string& k : missing) {
    if (shown == 8) {
      keys += ", ...";
      break;
    }
    keys += (shown ? ", '" : "'") + k + "'";
    ++shown;
  }
  return where + ": timed out after " + std::to_string(timeout.count()) + " ms waiting for " +
         std::to_string(missing.size()) + " of " + std::to_string(total) + " key(s): " + keys +
         ". The rank that should set them has not (is it running, and at the same step?); "
         "raise the timeout if it is just slow.";
}

void check_multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  if (keys.size() != values.size()) {
    throw InvalidArgument("multi_set: " + std::to_string(keys.size()) + " keys but " +
                          std::to_string(values.size()) + " values; pass one value per key");
  }
}

}  // namespace tpcomm::store_util
