// The one registry of environment variables. Every TPCOMM_* knob (and every foreign variable
// tpcomm honours: MASTER_ADDR, RANK, SLURM_*, ...) is declared here with its type, default,
// allowed values and meaning; nothing else in tpcomm reads the environment.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tpcomm::config {

/// How a value is parsed.
enum class Type {
  Bool,      ///< 1/0, true/false, yes/no, on/off
  Int,       ///< signed decimal integer, range in `allowed` as "MIN..MAX" (either may be empty)
  Size,      ///< bytes with optional suffix: 4096, 64K, 4M, 1G, 4MiB, 4MB (powers of 1024)
  Double,    ///< decimal number
  Duration,  ///< 300, 300s, 250ms, 5m, 1h (bare numbers: seconds unless noted)
  String,    ///< free text
  Enum,      ///< one of `allowed` ("a|b|c"), case-insensitive
  List,      ///< comma-separated items, each one of `allowed` if it is non-empty
};

/// Name of a Type ("size", "duration", ...), for messages and tpinfo.
const char* type_name(Type t);

/// One registry entry. `external` marks variables whose name tpcomm does not own
/// (MASTER_ADDR, RANK, ...); they are documented but never warned about.
struct Param {
  std::string_view name;
  Type type;
  std::string_view default_value;  ///< as it would be written in the environment; "" = unset
  std::string_view allowed;        ///< Enum/List: "a|b|c"; Int: "MIN..MAX"; else ""
  std::string_view description;
  std::string_view subsystem;  ///< "core", "store", "net", "launch", ...
  bool external = false;
};

/// Adds entries (a transport registers its own at load). Names must be unique.
void register_params(std::span<const Param> params);

/// The entry for `name`, or nullptr.
const Param* find(std::string_view name);

/// All entries, sorted by name.
std::vector<const Param*> all();

/// Raw value from the environment snapshot (nullopt when unset). The name must be
/// registered.
std::optional<std::string> raw(std::string_view name);

/// Typed accessors: the environment's value if set, else the default. A malformed value
/// throws ConfigError naming the variable, the value and what it accepts.
bool get_bool(std::string_view name);
int64_t get_int(std::string_view name);
uint64_t get_size(std::string_view name);
double get_double(std::string_view name);
std::chrono::milliseconds get_duration(std::string_view name);
std::string get_string(std::string_view name);
/// Enum: the lower-cased value.
std::string get_enum(std::string_view name);
std::vector<std::string> get_list(std::string_view name);

/// True when the variable is set in the environment snapshot.
bool is_set(std::string_view name);

/// The whole environment snapshot as "NAME=value" strings, to hand on to child processes
/// (tprun builds its workers' environment from it). To read a value, use the getters.
std::vector<std::string> environment();

/// Checks every set TPCOMM_* variable: throws ConfigError on the first malformed one, and
/// returns a warning for each unknown TPCOMM_ name with the nearest known name suggested
/// (the caller logs them). Called by init paths.
std::vector<std::string> validate();

/// Re-reads the process environment (tests change it with setenv between runs).
void reload();

/// A number that changes whenever a value may have changed (reload(), register_params()).
/// Hot paths cache what they parsed and re-read only when it moved: one atomic load per call.
uint64_t generation() noexcept;

/// Parsers, exposed for tests and for values that come from elsewhere (tprun flags).
std::optional<uint64_t> parse_size(std::string_view s);
std::optional<std::chrono::milliseconds> parse_duration(std::string_view s);
std::optional<bool> parse_bool(std::string_view s);
std::optional<int64_t> parse_int(std::string_view s);

/// Edit distance, for "did you mean" suggestions.
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace tpcomm::config
