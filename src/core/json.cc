// JSON helpers over nlohmann::json (json.h).
#include "core/json.h"

#include <limits>

#include "tpcomm/error.hpp"

namespace tpcomm::json {

namespace {

[[noreturn]] void wrong_kind(const Json& v, std::string_view what, const char* want) {
  throw InvalidArgument(std::string(what) + " must be " + want + ", not " + kind_name(v));
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; the rest is the reason.
std::string reason_of(const nlohmann::json::exception& e) {
  std::string m = e.what();
  size_t p = m.find("] ");
  return p == std::string::npos ? m : m.substr(p + 2);
}

}  // namespace

Json parse(std::string_view text, std::string_view what) {
  const std::string w(what);
  if (text.size() > kMaxInput)
    throw InvalidArgument(w + ": malformed JSON at offset 0: input of " +
                          std::to_string(text.size()) + " bytes exceeds the limit of " +
                          std::to_string(kMaxInput));
  // The callback sees every value as it opens; a document nested too deeply is refused before
  // its inner values are built.
  auto depth_guard = [&](int depth, Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxDepth)
      throw InvalidArgument(w + ": malformed JSON: nesting deeper than " +
                            std::to_string(kMaxDepth));
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), depth_guard);
  } catch (const nlohmann::json::parse_error& e) {
    size_t offset = e.byte > 0 ? e.byte - 1 : 0;
    throw InvalidArgument(w + ": malformed JSON at offset " + std::to_string(offset) + ": " +
                          reason_of(e));
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(w + ": malformed JSON: " + reason_of(e));
  }
}

std::string dump(const Json& v, int indent) {
  return v.dump(indent, ' ', false, Json::error_handler_t::replace);
}

const char* kind_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "binary data";
  }
}

bool as_bool(const Json& v, std::string_view what) {
  if (!v.is_boolean()) wrong_kind(v, what, "a boolean");
  return v.get<bool>();
}

int64_t as_int(const Json& v, std::string_view what) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw InvalidArgument(std::string(what) + " is out of range: " + std::to_string(u));
    return static_cast<int64_t>(u);
  }
  if (!v.is_number_integer()) wrong_kind(v, what, "an integer");
  return v.get<int64_t>();
}

uint64_t as_uint(const Json& v, std::string_view what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (!v.is_number_integer()) wrong_kind(v, what, "an integer");
  int64_t i = v.get<int64_t>();
  if (i < 0) throw InvalidArgument(std::string(what) + " is negative: " + std::to_string(i));
  return static_cast<uint64_t>(i);
}

double as_double(const Json& v, std::string_view what) {
  if (!v.is_number()) wrong_kind(v, what, "a number");
  return v.get<double>();
}

const std::string& as_string(const Json& v, std::string_view what) {
  if (!v.is_string()) wrong_kind(v, what, "a string");
  return v.get_ref<const std::string&>();
}

const Json& as_array(const Json& v, std::string_view what) {
  if (!v.is_array()) wrong_kind(v, what, "an array");
  return v;
}

const Json& as_object(const Json& v, std::string_view what) {
  if (!v.is_object()) wrong_kind(v, what, "an object");
  return v;
}

const Json* find(const Json& o, std::string_view key) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(std::string(key));
  return it == o.end() ? nullptr : &*it;
}

}  // namespace tpcomm::json
