// JSON for everything tpcomm reads or writes (topology dumps and summaries, tpbench --json,
// tpinfo --json): nlohmann::json with insertion-ordered objects, so that output is
// deterministic and round-trips. What is read may come from another process or a file, so
// parse() bounds size and depth and turns every failure into InvalidArgument naming the
// input; the typed accessors name the field at fault.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tpcomm::json {

using Json = nlohmann::ordered_json;

/// Limits of the reader (a summary is a few KiB; a dump of a large machine under 1 MiB).
inline constexpr size_t kMaxInput = 16u << 20;
inline constexpr int kMaxDepth = 32;

/// Parses exactly one JSON value (surrounding whitespace allowed). Throws InvalidArgument
/// "<what>: malformed JSON at offset N: <reason>" on bad input.
Json parse(std::string_view text, std::string_view what = "JSON");

/// Serializes `v`: compact when indent < 0, else pretty-printed with that many spaces.
/// Bytes that are not UTF-8 are written as U+FFFD instead of throwing.
std::string dump(const Json& v, int indent = -1);

/// "null", "a boolean", "an integer", "a number", "a string", "an array", "an object".
const char* kind_name(const Json& v);

// Typed accessors; a wrong type throws InvalidArgument "<what> must be <kind>, not <kind>".
bool as_bool(const Json& v, std::string_view what);
int64_t as_int(const Json& v, std::string_view what);
uint64_t as_uint(const Json& v, std::string_view what);
double as_double(const Json& v, std::string_view what);
const std::string& as_string(const Json& v, std::string_view what);
const Json& as_array(const Json& v, std::string_view what);
const Json& as_object(const Json& v, std::string_view what);

/// Member lookup; nullptr when absent or when `o` is not an object.
const Json* find(const Json& o, std::string_view key);

}  // namespace tpcomm::json
