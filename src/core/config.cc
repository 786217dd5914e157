#include "core/config.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include "tpcomm/error.hpp"

extern char** environ;

namespace tpcomm::config {

// Defined in config_params.cc: the core's own entries, the NCCL_* variables with a TPCOMM_*
// counterpart, and the variables that name a file tpcomm reads.
std::span<const Param> core_params();
std::span<const std::pair<std::string_view, std::string_view>> nccl_counterparts();
std::span<const std::string_view> file_params();

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, Param, std::less<>> params;
  std::map<std::string, std::string, std::less<>> env;
  bool env_loaded = false;

  Registry() {
    for (const Param& p : core_params()) params.emplace(std::string(p.name), p);
  }

  void load_env_locked() {
    env.clear();
    for (char** e = environ; e && *e; ++e) {
      std::string_view kv(*e);
      size_t eq = kv.find('=');
      if (eq == std::string_view::npos) continue;
      env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
    }
    env_loaded = true;
  }
};

std::atomic<uint64_t> g_generation{0};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: used from exit paths
  return *r;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    std::string_view item = trim(s.substr(start, end - start));
    if (!item.empty()) out.emplace_back(item);
    start = end + 1;
  }
  return out;
}

const Param& require(std::string_view name) {
  const Param* p = find(name);
  if (!p) {
    // A programming error inside tpcomm: every read must go through a registered name.
    throw ConfigError("tpcomm internal error: variable " + std::string(name) +
                      " is read but not registered in the configuration registry");
  }
  return *p;
}

std::string accepts(const Param& p) {
  switch (p.type) {
    case Type::Bool:
      return "a boolean (1/0, true/false, yes/no, on/off)";
    case Type::Int:
      return p.allowed.empty() ? "an integer" : "an integer in " + std::string(p.allowed);
    case Type::Size:
      return "a size in bytes, optionally with a suffix K, M or G (e.g. 4M)";
    case Type::Double:
      return "a number";
    case Type::Duration:
      return "a duration (e.g. 300, 30s, 250ms, 5m)";
    case Type::String:
      return "any text";
    case Type::Enum:
      return "one of " + std::string(p.allowed);
    case Type::List:
      return p.allowed.empty() ? "a comma-separated list"
                               : "a comma-separated list of " + std::string(p.allowed);
  }
  return "?";
}

[[noreturn]] void malformed(const Param& p, std::string_view value) {
  throw ConfigError(std::string(p.name) + "='" + std::string(value) +
                    "' is malformed: " + std::string(p.name) + " takes " + accepts(p) +
                    " (default '" + std::string(p.default_value) + "'). Fix or unset it.");
}

// The value to parse: the environment's, else the default.
std::string effective(const Param& p) {
  auto v = raw(p.name);
  return v ? *v : std::string(p.default_value);
}

bool in_allowed(const Param& p, std::string_view v) {
  for (const std::string& a : split(p.allowed, '|'))
    if (lower(a) == lower(v)) return true;
  return false;
}

void check_value(const Param& p, std::string_view v) {
  switch (p.type) {
    case Type::Bool:
      if (!parse_bool(v)) malformed(p, v);
      break;
    case Type::Int: {
      auto i = parse_int(v);
      if (!i) malformed(p, v);
      if (!p.allowed.empty()) {
        std::string_view r = p.allowed;
        size_t dots = r.find("..");
        auto lo = parse_int(r.substr(0, dots));
        auto hi = dots == std::string_view::npos ? std::nullopt : parse_int(r.substr(dots + 2));
        if ((lo && *i < *lo) || (hi && *i > *hi)) malformed(p, v);
      }
      break;
    }
    case Type::Size:
      if (!parse_size(v)) malformed(p, v);
      break;
    case Type::Double: {
      std::string s(trim(v));
      char* end = nullptr;
      errno = 0;
      double d = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0' || errno != 0 || !std::isfinite(d)) malformed(p, v);
      break;
    }
    case Type::Duration:
      if (!parse_duration(v)) malformed(p, v);
      break;
    case Type::String:
      break;
    case Type::Enum:
      if (!in_allowed(p, trim(v))) malformed(p, v);
      break;
    case Type::List:
      if (!p.allowed.empty())
        for (const std::string& item : split(v, ','))
          if (!in_allowed(p, item)) malformed(p, v);
      break;
  }
#ifndef TPCOMM_ENABLE_TRACE
  if (p.name == "TPCOMM_DEBUG" && lower(trim(v)) == "trace")
    throw ConfigError("TPCOMM_DEBUG='" + std::string(v) +
                      "': trace lines are not compiled into this build (configure with "
                      "-DTPCOMM_ENABLE_TRACE=ON); use info, warn or none");
#endif
}

// A variable that names a file tpcomm reads: the file must be readable.
void check_file(const Param& p, const std::string& v) {
  if (v.empty()) return;
  for (std::string_view f : file_params()) {
    if (p.name != f) continue;
    if (::access(v.c_str(), R_OK) != 0)
      throw ConfigError(std::string(p.name) + "='" + v +
                        "' cannot be read: " + std::strerror(errno) + ". Fix or unset it.");
  }
}

}  // namespace

const char* type_name(Type t) {
  switch (t) {
    case Type::Bool:
      return "bool";
    case Type::Int:
      return "int";
    case Type::Size:
      return "size";
    case Type::Double:
      return "double";
    case Type::Duration:
      return "duration";
    case Type::String:
      return "string";
    case Type::Enum:
      return "enum";
    case Type::List:
      return "list";
  }
  return "?";
}

void register_params(std::span<const Param> params) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  for (const Param& p : params) r.params.insert_or_assign(std::string(p.name), p);
  g_generation.fetch_add(1, std::memory_order_release);
}

uint64_t generation() noexcept { return g_generation.load(std::memory_order_acquire); }

const Param* find(std::string_view name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  auto it = r.params.find(name);
  return it == r.params.end() ? nullptr : &it->second;
}

std::vector<const Param*> all() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  std::vector<const Param*> out;
  for (auto& [name, p] : r.params) out.push_back(&p);
  return out;
}

std::optional<std::string> raw(std::string_view name) {
  require(name);
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.env_loaded) r.load_env_locked();
  auto it = r.env.find(name);
  if (it == r.env.end()) return std::nullopt;
  return it->second;
}

bool is_set(std::string_view name) { return raw(name).has_value(); }

std::vector<std::string> environment() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.env_loaded) r.load_env_locked();
  std::vector<std::string> out;
  out.reserve(r.env.size());
  for (const auto& [k, v] : r.env) out.push_back(k + "=" + v);
  return out;
}

bool get_bool(std::string_view name) {
  const Param& p = require(name);
  std::string v = effective(p);
  auto b = parse_bool(v);
  if (!b) malformed(p, v);
  return *b;
}

int64_t get_int(std::string_view name) {
  const Param& p = require(name);
  std::string v = effective(p);
  check_value(p, v);
  return *parse_int(v);
}

uint64_t get_size(std::string_view name) {
  const Param& p = require(name);
  std::string v = effective(p);
  auto s = parse_size(v);
  if (!s) malformed(p, v);
  return *s;
}

double get_double(std::string_view name) {
  const Param& p = require(name);
  std::string v = effective(p);
  check_value(p, v);
  return std::strtod(v.c_str(), nullptr);
}

std::chrono::milliseconds get_duration(std::string_view name) {
  const Param& p = require(name);
  std::string v = effective(p);
  auto d = parse_duration(v);
  if (!d) malformed(p, v);
  return *d;
}

std::string get_string(std::string_view name) { return effective(require(name)); }

std::string get_enum(std::string_view name) {
  const Param& p = require(name);
  std::string v(trim(effective(p)));
  check_value(p, v);
  return lower(v);
}

std::vector<std::string> get_list(std::string_view name) {
  const Param& p = require(name);
  std::string v = effective(p);
  check_value(p, v);
  return split(v, ',');
}

std::vector<std::string> validate() {
  std::vector<std::string> warnings;
  std::vector<std::pair<std::string, std::string>> set;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    if (!r.env_loaded) r.load_env_locked();
    for (auto& [k, v] : r.env)
      if (k.rfind("TPCOMM_", 0) == 0 || k.rfind("NCCL_", 0) == 0) set.emplace_back(k, v);
  }
  for (auto& [k, v] : set) {
    if (k.rfind("NCCL_", 0) == 0) {
      for (const auto& [nccl, ours] : nccl_counterparts())
        if (k == nccl)
          warnings.push_back(
              k +
              " is set, but tpcomm does not read NCCL_* variables: its "
              "counterpart is " +
              std::string(ours) +
              (find(ours) && is_set(ours) ? " (set to '" + *raw(ours) + "')" : " (unset)"));
      continue;
    }
    const Param* p = find(k);
    if (p) {
      check_value(*p, v);
      check_file(*p, v);
      continue;
    }
    std::string best;
    size_t best_d = SIZE_MAX;
    for (const Param* q : all()) {
      if (q->external) continue;
      size_t d = edit_distance(k, q->name);
      if (d < best_d) best_d = d, best = std::string(q->name);
    }
    std::string w = "unknown variable " + k + " is ignored";
    if (!best.empty() && best_d <= std::max<size_t>(3, k.size() / 4))
      w += "; did you mean " + best + "?";
    w += " (tpinfo lists every TPCOMM_* variable)";
    warnings.push_back(std::move(w));
  }
  return warnings;
}

void reload() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  r.load_env_locked();
  g_generation.fetch_add(1, std::memory_order_release);
}

std::optional<bool> parse_bool(std::string_view s) {
  std::string v = lower(trim(s));
  if (v == "1" || v == "true" || v == "yes" || v == "on" || v == "y") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off" || v == "n") return false;
  return std::nullopt;
}

std::optional<int64_t> parse_int(std::string_view s) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<uint64_t> parse_size(std::string_view s) {
  s = trim(s);
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr == s.data()) return std::nullopt;
  std::string suffix = lower(trim(std::string_view(ptr, s.data() + s.size() - ptr)));
  uint64_t mult = 1;
  if (suffix.empty() || suffix == "b")
    mult = 1;
  else if (suffix == "k" || suffix == "kb" || suffix == "kib")
    mult = 1ull << 10;
  else if (suffix == "m" || suffix == "mb" || suffix == "mib")
    mult = 1ull << 20;
  else if (suffix == "g" || suffix == "gb" || suffix == "gib")
    mult = 1ull << 30;
  else if (suffix == "t" || suffix == "tb" || suffix == "tib")
    mult = 1ull << 40;
  else
    return std::nullopt;
  if (v > UINT64_MAX / mult) return std::nullopt;
  return v * mult;
}

std::optional<std::chrono::milliseconds> parse_duration(std::string_view s) {
  s = trim(s);
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  double v = 0;
  auto [ptr, ec] = std::from_chars(begin, end, v);
  if (s.empty() || ec != std::errc() || ptr == begin || v < 0 || !std::isfinite(v))
    return std::nullopt;
  std::string suffix = lower(trim(std::string_view(ptr, end - ptr)));
  double ms;
  if (suffix.empty() || suffix == "s")
    ms = v * 1000;
  else if (suffix == "ms")
    ms = v;
  else if (suffix == "us")
    ms = v / 1000;
  else if (suffix == "m" || suffix == "min")
    ms = v * 60'000;
  else if (suffix == "h")
    ms = v * 3'600'000;
  else
    return std::nullopt;
  if (ms > 1e15) return std::nullopt;
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(ms)));
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (std::toupper(static_cast<unsigned char>(a[i - 1])) ==
                                          std::toupper(static_cast<unsigned char>(b[j - 1]))
                                      ? 0
                                      : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace tpcomm::config
