// Logging: one sink (stderr or TPCOMM_DEBUG_FILE), levels (TPCOMM_DEBUG) and a subsystem mask
// (TPCOMM_DEBUG_SUBSYS). Silent by default. Use the TPLOG macro:
//   TPLOG(INFO, STORE) << "server listening on " << host << ":" << port;
// The stream expression is evaluated only when the line is enabled; TRACE lines are compiled
// out unless TPCOMM_ENABLE_TRACE is defined.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

namespace tpcomm::log {

enum class Level : int { None = 0, Warn = 1, Info = 2, Trace = 3 };

enum class Subsys : uint32_t {
  INIT = 1u << 0,
  STORE = 1u << 1,
  NET = 1u << 2,
  COLL = 1u << 3,
  TOPO = 1u << 4,
  LAUNCH = 1u << 5,
  ENV = 1u << 6,
  SHM = 1u << 7,
  TCP = 1u << 8,
  UCX = 1u << 9,
  IBVERBS = 1u << 10,
  P2P = 1u << 11,
  ALLOC = 1u << 12,
};

/// Current settings, parsed from the registry on first use (and by reload()).
struct Settings {
  Level level = Level::None;
  uint32_t mask = 0xffffffffu;
};

/// Fast check used by TPLOG before building the line.
bool enabled(Level level, Subsys subsys);

/// Re-reads TPCOMM_DEBUG, TPCOMM_DEBUG_SUBSYS and TPCOMM_DEBUG_FILE (after config::reload()).
/// A malformed value throws ConfigError.
void reload();

/// Writes one complete line to the sink: "host:pid:tid [LEVEL subsys] file:line message".
void write(Level level, Subsys subsys, const char* file, int line, const std::string& msg);

/// Writes "tpcomm: warning: MSG" to the sink whatever TPCOMM_DEBUG says (the default level
/// shows it), once per process for each distinct message: configuration mistakes a user must
/// see (unknown or ignored variables).
void notice_once(const std::string& msg);

/// Name of a subsystem ("store").
const char* subsys_name(Subsys s);

/// Collects one line and writes it on destruction.
class Line {
 public:
  Line(Level level, Subsys subsys, const char* file, int line)
      : level_(level), subsys_(subsys), file_(file), line_(line) {}
  ~Line() { write(level_, subsys_, file_, line_, os_.str()); }
  std::ostringstream& stream() { return os_; }

 private:
  Level level_;
  Subsys subsys_;
  const char* file_;
  int line_;
  std::ostringstream os_;
};

#ifdef TPCOMM_ENABLE_TRACE
inline constexpr bool kTraceCompiled = true;
#else
inline constexpr bool kTraceCompiled = false;
#endif

}  // namespace tpcomm::log

#define TPCOMM_LOG_LEVEL_WARN ::tpcomm::log::Level::Warn
#define TPCOMM_LOG_LEVEL_INFO ::tpcomm::log::Level::Info
#define TPCOMM_LOG_LEVEL_TRACE ::tpcomm::log::Level::Trace

#define TPLOG(LEVEL, SUBSYS)                                                               \
  if (!((TPCOMM_LOG_LEVEL_##LEVEL != ::tpcomm::log::Level::Trace ||                        \
         ::tpcomm::log::kTraceCompiled) &&                                                 \
        ::tpcomm::log::enabled(TPCOMM_LOG_LEVEL_##LEVEL, ::tpcomm::log::Subsys::SUBSYS)))  \
    ;                                                                                      \
  else                                                                                     \
    ::tpcomm::log::Line(TPCOMM_LOG_LEVEL_##LEVEL, ::tpcomm::log::Subsys::SUBSYS, __FILE__, \
                        __LINE__)                                                          \
        .stream()
