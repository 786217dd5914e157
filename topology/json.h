// A tiny JSON value with a writer and a strict, bounded reader. The topology layer uses it for
// TPCOMM_TOPO_DUMP_FILE and for the per-rank summary published through the store, so the
// reader treats its input as untrusted: it checks every byte, caps nesting depth and size,
// and throws InvalidArgument with the offset of the first problem.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tpcomm::topo::json {

class Value;
using Array = std::vector<Value>;
// Members keep their insertion order so that writing is deterministic and round-trips.
using Object = std::vector<std::pair<std::string, Value>>;

/// One JSON value. Integers and doubles are kept apart so that integers round-trip exactly.
class Value {
 public:
  Value() = default;
  Value(std::nullptr_t) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(int64_t i) : v_(i) {}
  Value(uint64_t i) : v_(static_cast<int64_t>(i)) {}
  Value(double d) : v_(d) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(Array a) : v_(std::move(a)) {}
  Value(Object o) : v_(std::move(o)) {}

  bool is_null() const { return std::holds_alternative<std::monostate>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_number() const { return is_int() || std::holds_alternative<double>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_array() const { return std::holds_alternative<Array>(v_); }
  bool is_object() const { return std::holds_alternative<Object>(v_); }

  // Typed accessors; a wrong type throws InvalidArgument naming `what` (the field).
  bool as_bool(std::string_view what) const;
  int64_t as_int(std::string_view what) const;
  double as_double(std::string_view what) const;
  const std::string& as_string(std::string_view what) const;
  const Array& as_array(std::string_view what) const;
  const Object& as_object(std::string_view what) const;

  /// Member lookup in an object; nullptr when absent (or when this is not an object).
  const Value* find(std::string_view key) const;

  /// Adds a member (this must be an object, or null which becomes one).
  Value& set(std::string key, Value v);
  /// Appends an element (this must be an array, or null which becomes one).
  Value& push(Value v);

  bool operator==(const Value& o) const = default;

  /// std::visit over the held alternative (monostate, bool, int64_t, double, string, ...).
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), v_);
  }

 private:
  std::variant<std::monostate, bool, int64_t, double, std::string, Array, Object> v_;
};

/// Serializes `v`: compact when indent is 0, else pretty-printed with that many spaces.
std::string write(const Value& v, int indent = 0);

/// Limits of the reader (a summary is a few KiB; a dump of a large machine under 1 MiB).
inline constexpr size_t kMaxInput = 16u << 20;
inline constexpr int kMaxDepth = 32;

/// Parses exactly one JSON value (surrounding whitespace allowed). Throws InvalidArgument
/// "<what>: malformed JSON at offset N: <reason>" on bad input.
Value parse(std::string_view text, std::string_view what = "JSON");

}  // namespace tpcomm::topo::json
