#include "core/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>

#include "core/config.h"
#include "tpcomm/error.hpp"

namespace tpcomm::log {

namespace {

struct SubsysName {
  Subsys s;
  const char* name;
};
constexpr SubsysName kNames[] = {
    {Subsys::INIT, "init"},   {Subsys::STORE, "store"},     {Subsys::NET, "net"},
    {Subsys::COLL, "coll"},   {Subsys::TOPO, "topo"},       {Subsys::LAUNCH, "launch"},
    {Subsys::ENV, "env"},     {Subsys::SHM, "shm"},         {Subsys::TCP, "tcp"},
    {Subsys::UCX, "ucx"},     {Subsys::IBVERBS, "ibverbs"}, {Subsys::P2P, "p2p"},
    {Subsys::ALLOC, "alloc"},
};

std::atomic<int> g_level{-1};  // -1: not loaded yet
std::atomic<uint32_t> g_mask{0xffffffffu};
std::mutex g_sink_mu;
FILE* g_sink = nullptr;  // nullptr: stderr

std::string expand_path(const std::string& pattern) {
  std::string out;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[i + 1];
      if (c == 'h') {
        out += host;
        ++i;
        continue;
      }
      if (c == 'p') {
        out += std::to_string(getpid());
        ++i;
        continue;
      }
      if (c == '%') {
        out += '%';
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

void load_settings() {
  Level level = Level::None;
  std::string lv = config::get_enum("TPCOMM_DEBUG");
  if (lv == "warn")
    level = Level::Warn;
  else if (lv == "info")
    level = Level::Info;
  else if (lv == "trace")
    level = Level::Trace;

  uint32_t mask = 0;
  bool any_positive = false;
  uint32_t excluded = 0;
  for (const std::string& item : config::get_list("TPCOMM_DEBUG_SUBSYS")) {
    bool neg = item[0] == '^';
    std::string name = neg ? item.substr(1) : item;
    uint32_t bits = 0;
    if (name == "all" || name == "ALL") bits = 0xffffffffu;
    for (const auto& n : kNames)
      if (strcasecmp(n.name, name.c_str()) == 0) bits = static_cast<uint32_t>(n.s);
    if (neg)
      excluded |= bits;
    else
      any_positive = true, mask |= bits;
  }
  if (!any_positive) mask = 0xffffffffu;
  mask &= ~excluded;

  std::string file = config::get_string("TPCOMM_DEBUG_FILE");
  {
    std::lock_guard<std::mutex> lk(g_sink_mu);
    if (g_sink) fclose(g_sink), g_sink = nullptr;
    if (!file.empty() && level != Level::None) {
      std::string path = expand_path(file);
      g_sink = fopen(path.c_str(), "a");
      if (g_sink) setvbuf(g_sink, nullptr, _IOLBF, 0);
      // If the file cannot be opened the log goes to stderr, which says so once.
      if (!g_sink)
        fprintf(stderr, "tpcomm: cannot open TPCOMM_DEBUG_FILE '%s' (%s); logging to stderr\n",
                path.c_str(), strerror(errno));
    }
  }
  g_mask.store(mask, std::memory_order_relaxed);
  g_level.store(static_cast<int>(level), std::memory_order_release);
}

}  // namespace

const char* subsys_name(Subsys s) {
  for (const auto& n : kNames)
    if (n.s == s) return n.name;
  return "?";
}

bool enabled(Level level, Subsys subsys) {
  int cur = g_level.load(std::memory_order_acquire);
  if (cur < 0) {
    try {
      load_settings();
    } catch (const Error&) {
      // A malformed TPCOMM_DEBUG* is reported by config::validate() at init; until then stay
      // silent rather than throw out of a log statement.
      g_level.store(0, std::memory_order_release);
    }
    cur = g_level.load(std::memory_order_acquire);
  }
  return static_cast<int>(level) <= cur &&
         (g_mask.load(std::memory_order_relaxed) & static_cast<uint32_t>(subsys)) != 0;
}

void reload() { load_settings(); }

void notice_once(const std::string& msg) {
  static std::mutex mu;
  static std::set<std::string>* seen = new std::set<std::string>();  // used from exit paths
  {
    std::lock_guard<std::mutex> lk(mu);
    if (!seen->insert(msg).second) return;
  }
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string out =
      "tpcomm: warning: " + msg + " [" + host + ":" + std::to_string(getpid()) + "]\n";
  std::lock_guard<std::mutex> lk(g_sink_mu);
  FILE* f = g_sink ? g_sink : stderr;
  fwrite(out.data(), 1, out.size(), f);
  fflush(f);
}

void write(Level level, Subsys subsys, const char* file, int line, const std::string& msg) {
  static const char* kLevel[] = {"NONE", "WARN", "INFO", "TRACE"};
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;
  auto now = std::chrono::system_clock::now().time_since_epoch();
  double secs = std::chrono::duration<double>(now).count();
  char head[256];
  snprintf(head, sizeof(head), "%.6f %s:%d:%ld [%s %s] %s:%d ", secs, host, getpid(),
           static_cast<long>(syscall(SYS_gettid)), kLevel[static_cast<int>(level)],
           subsys_name(subsys), base, line);
  std::string out = head + msg + "\n";
  std::lock_guard<std::mutex> lk(g_sink_mu);
  FILE* f = g_sink ? g_sink : stderr;
  fwrite(out.data(), 1, out.size(), f);
  fflush(f);
}

}  // namespace tpcomm::log
