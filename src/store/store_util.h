// Helpers shared by the store implementations: counter encoding, compare_set semantics, key
// checks and the "missing keys" timeout message.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tpcomm/store.hpp"

namespace tpcomm::store_util {

/// Parses a counter value ("42", "-3"); nullopt if the bytes are not a decimal integer.
std::optional<int64_t> parse_counter(const Bytes& value);
/// Encodes a counter as decimal ASCII (the torch convention).
Bytes encode_counter(int64_t v);

/// Applies add(): returns the new value or throws StoreError naming the key when the
/// existing value is not an integer. `current` is nullptr when the key is absent.
int64_t apply_add(std::string_view key, const Bytes* current, int64_t delta);

/// compare_set semantics shared by every store. `current` is nullptr when absent. Returns
/// (value to store or nullopt for no change, value to return).
std::pair<std::optional<Bytes>, Bytes> apply_compare_set(const Bytes* current,
                                                         const Bytes& expected,
                                                         const Bytes& desired);

/// "keys a, b (2 of 3) not set after 300000 ms in <what>"-style TimeoutError text.
std::string missing_keys_message(const std::string& where, const std::vector<std::string>& missing,
                                 size_t total, std::chrono::milliseconds timeout);

/// Throws InvalidArgument when keys and values differ in length (multi_set).
void check_multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values);

}  // namespace tpcomm::store_util
