#include "topology/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <type_traits>

#include "tpcomm/error.hpp"

namespace tpcomm::topo::json {

namespace {

const char* kind_name(const Value& v) {
  if (v.is_null()) return "null";
  if (v.is_bool()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

[[noreturn]] void wrong_type(std::string_view what, const char* want, const Value& got) {
  throw InvalidArgument(std::string(what) + " must be " + want + ", not " + kind_name(got));
}

void write_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

void newline(std::string& out, int indent, int level) {
  if (indent <= 0) return;
  out.push_back('\n');
  out.append(static_cast<size_t>(indent * level), ' ');
}

class Reader {
 public:
  Reader(std::string_view text, std::string_view what) : s_(text), what_(what) {}

  Value document() {
    if (s_.size() > kMaxInput)
      fail("input is " + std::to_string(s_.size()) + " bytes, more than the limit of " +
           std::to_string(kMaxInput));
    skip_ws();
    Value v = value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw InvalidArgument(std::string(what_) + ": malformed JSON at offset " +
                          std::to_string(pos_) + ": " + why);
  }

  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r'))
      ++pos_;
  }

  bool eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void expect_word(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) fail("expected '" + std::string(w) + "'");
    pos_ += w.size();
  }

  Value value(int depth) {
    if (depth >= kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
    if (pos_ >= s_.size()) fail("unexpected end of input");
    char c = s_[pos_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Value(string());
    if (c == 't') return expect_word("true"), Value(true);
    if (c == 'f') return expect_word("false"), Value(false);
    if (c == 'n') return expect_word("null"), Value();
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    fail(std::string("unexpected character '") + c + "'");
  }

  Value object(int depth) {
    ++pos_;  // '{'
    Object o;
    skip_ws();
    if (eat('}')) return Value(std::move(o));
    for (;;) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a member name in quotes");
      std::string key = string();
      skip_ws();
      if (!eat(':')) fail("expected ':' after member name");
      skip_ws();
      o.emplace_back(std::move(key), value(depth + 1));
      skip_ws();
      if (eat('}')) return Value(std::move(o));
      if (!eat(',')) fail("expected ',' or '}' in object");
    }
  }

  Value array(int depth) {
    ++pos_;  // '['
    Array a;
    skip_ws();
    if (eat(']')) return Value(std::move(a));
    for (;;) {
      skip_ws();
      a.push_back(value(depth + 1));
      skip_ws();
      if (eat(']')) return Value(std::move(a));
      if (!eat(',')) fail("expected ',' or ']' in array");
    }
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<unsigned>(c - 'A' + 10);
      else
        fail("bad hex digit in \\u escape");
    }
    return v;
  }

  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  std::string string() {
    ++pos_;  // '"'
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '/':
          out.push_back('/');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!(eat('\\') && eat('u'))) fail("unpaired surrogate in \\u escape");
            unsigned lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("bad low surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("unpaired surrogate in \\u escape");
          }
          utf8(out, cp);
          break;
        }
        default:
          fail(std::string("bad escape '\\") + e + "'");
      }
    }
  }

  Value number() {
    size_t start = pos_;
    eat('-');
    if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') fail("expected a digit");
    if (s_[pos_] == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9')
      fail("leading zero in number");
    bool integral = true;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c >= '0' && c <= '9') {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || (c == '-' && pos_ > start)) {
        integral = false;
        ++pos_;
      } else {
        break;
      }
    }
    const char* b = s_.data() + start;
    const char* e = s_.data() + pos_;
    if (integral) {
      int64_t i = 0;
      auto [p, ec] = std::from_chars(b, e, i);
      if (ec == std::errc() && p == e) return Value(i);
      pos_ = start;
      fail("integer out of range");
    }
    double d = 0;
    auto [p, ec] = std::from_chars(b, e, d);
    if (ec != std::errc() || p != e || !std::isfinite(d)) {
      pos_ = start;
      fail("malformed number");
    }
    return Value(d);
  }

  std::string_view s_;
  std::string_view what_;
  size_t pos_ = 0;
};

}  // namespace

bool Value::as_bool(std::string_view what) const {
  if (!is_bool()) wrong_type(what, "a boolean", *this);
  return std::get<bool>(v_);
}

int64_t Value::as_int(std::string_view what) const {
  if (!is_int()) wrong_type(what, "an integer", *this);
  return std::get<int64_t>(v_);
}

double Value::as_double(std::string_view what) const {
  if (is_int()) return static_cast<double>(std::get<int64_t>(v_));
  if (!is_number()) wrong_type(what, "a number", *this);
  return std::get<double>(v_);
}

const std::string& Value::as_string(std::string_view what) const {
  if (!is_string()) wrong_type(what, "a string", *this);
  return std::get<std::string>(v_);
}

const Array& Value::as_array(std::string_view what) const {
  if (!is_array()) wrong_type(what, "an array", *this);
  return std::get<Array>(v_);
}

const Object& Value::as_object(std::string_view what) const {
  if (!is_object()) wrong_type(what, "an object", *this);
  return std::get<Object>(v_);
}

const Value* Value::find(std::string_view key) const {
  if (!is_object()) return nullptr;
  for (const auto& [k, v] : std::get<Object>(v_))
    if (k == key) return &v;
  return nullptr;
}

Value& Value::set(std::string key, Value v) {
  if (is_null()) v_ = Object{};
  std::get<Object>(v_).emplace_back(std::move(key), std::move(v));
  return *this;
}

Value& Value::push(Value v) {
  if (is_null()) v_ = Array{};
  std::get<Array>(v_).push_back(std::move(v));
  return *this;
}

namespace {

template <class>
[[maybe_unused]] inline constexpr bool kAlwaysFalse = false;

void write_value(std::string& out, const Value& v, int indent, int level) {
  v.visit([&](const auto& x) {
    using X = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<X, std::monostate>) {
      out += "null";
    } else if constexpr (std::is_same_v<X, bool>) {
      out += x ? "true" : "false";
    } else if constexpr (std::is_same_v<X, int64_t>) {
      out += std::to_string(x);
    } else if constexpr (std::is_same_v<X, double>) {
      if (!std::isfinite(x)) {
        out += "null";
        return;
      }
      char buf[64];
      auto res = std::to_chars(buf, buf + sizeof(buf), x);
      std::string s(buf, res.ptr);
      if (s.find_first_of(".eE") == std::string::npos) s += ".0";  // stays a double
      out += s;
    } else if constexpr (std::is_same_v<X, std::string>) {
      write_string(out, x);
    } else if constexpr (std::is_same_v<X, Array>) {
      out.push_back('[');
      for (size_t i = 0; i < x.size(); ++i) {
        if (i) out.push_back(',');
        if (indent > 0 && (x[i].is_array() || x[i].is_object())) newline(out, indent, level + 1);
        write_value(out, x[i], indent, level + 1);
      }
      out.push_back(']');
    } else if constexpr (std::is_same_v<X, Object>) {
      out.push_back('{');
      for (size_t i = 0; i < x.size(); ++i) {
        if (i) out.push_back(',');
        newline(out, indent, level + 1);
        write_string(out, x[i].first);
        out += indent > 0 ? ": " : ":";
        write_value(out, x[i].second, indent, level + 1);
      }
      if (!x.empty()) newline(out, indent, level);
      out.push_back('}');
    } else {
      static_assert(kAlwaysFalse<X>, "unhandled JSON alternative");
    }
  });
}

}  // namespace

std::string write(const Value& v, int indent) {
  std::string out;
  write_value(out, v, indent, 0);
  return out;
}

Value parse(std::string_view text, std::string_view what) { return Reader(text, what).document(); }

}  // namespace tpcomm::topo::json
