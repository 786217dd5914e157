// PeerWatch: pidfds and process states of the same-host peers, verdicts of the heartbeats.
#include "core/liveness.h"

#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace tpcomm {

namespace {

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

// The state letter and start time of process `pid` from /proc/<pid>/stat; false when it
// is gone.
bool read_stat(long pid, char* state, uint64_t* start) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return false;
  // The command name (field 2) may hold spaces and parentheses: fields resume after the last
  // ')'. Field 3 is the state, field 22 the start time.
  size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream is(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && (is >> field); ++i) {
    if (i == 3) *state = field.empty() ? '?' : field[0];
    if (i == 22) *start = std::stoull(field);
  }
  return static_cast<bool>(is);
}

std::string read_boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id.empty() ? "unknown" : id;
}

uint64_t pid_namespace() {
  struct stat st;
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

long ms_between(PeerWatch::Clock::time_point a, PeerWatch::Clock::time_point b) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count());
}

}  // namespace

PeerWatch::PeerWatch(int rank, int world_size, std::string host_id,
                     std::chrono::milliseconds stop_timeout)
    : rank_(rank),
      host_id_(std::move(host_id)),
      stop_timeout_(stop_timeout),
      boot_(read_boot_id()),
      pidns_(pid_namespace()),
      peers_(static_cast<size_t>(world_size)) {}

PeerWatch::~PeerWatch() {
  for (Peer& p : peers_)
    if (p.pidfd >= 0) ::close(p.pidfd);
}

std::string PeerWatch::self_record() const {
  char state = '?';
  uint64_t start = 0;
  read_stat(::getpid(), &state, &start);
  std::ostringstream os;
  os << ::getpid() << " " << boot_ << " " << pidns_ << " " << start << " " << host_id_;
  return os.str();
}

void PeerWatch::add(int r, const std::string& record) {
  std::istringstream is(record);
  long pid = 0;
  std::string boot;
  uint64_t ns = 0, start = 0;
  if (!(is >> pid >> boot >> ns >> start) || pid <= 0) return;
  std::string host;
  std::getline(is >> std::ws, host);
  std::lock_guard<std::mutex> lk(mu_);
  if (r < 0 || static_cast<size_t>(r) >= peers_.size() || r == rank_) return;
  Peer& p = peers_[static_cast<size_t>(r)];
  if (p.known) return;
  p.known = true;
  p.host = host;
  if (boot != boot_ || ns != pidns_ || ns == 0) return;  // another host: the heartbeats watch it
  p.pid = pid;
  p.start = start;
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  if (fd >= 0) {
    p.pidfd = fd;
  } else if (errno == ESRCH) {
    p.failure = "dead: its process " + who(p) + " no longer exists";
    return;
  }
  // The pid may have been reused since the peer published it: the start time tells.
  char state = '?';
  uint64_t now_start = 0;
  if (!read_stat(pid, &state, &now_start) || (start != 0 && now_start != start))
    p.failure = "dead: its process " + who(p) + " no longer exists";
}

void PeerWatch::resolve(Store& store, bool now) {
  std::vector<int> missing;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (all_known_) return;
    auto t = Clock::now();
    if (!now && t < next_resolve_) return;
    next_resolve_ = t + std::chrono::seconds(1);
    for (size_t r = 0; r < peers_.size(); ++r)
      if (static_cast<int>(r) != rank_ && !peers_[r].known) missing.push_back(static_cast<int>(r));
    if (missing.empty()) {
      all_known_ = true;
      return;
    }
  }
  try {
    std::vector<std::string> keys;
    for (int r : missing) keys.push_back(key(r));
    // A server that does not answer is not waited for long (the progress thread asks).
    const std::chrono::milliseconds bound =
        stop_timeout_.count() > 0 ? stop_timeout_ : std::chrono::milliseconds(10000);
    if (store.check_within(keys, bound)) {
      std::vector<Bytes> values = store.multi_get(keys);
      for (size_t i = 0; i < missing.size(); ++i) add(missing[i], to_string(values[i]));
      return;
    }
    // Some have not started yet: look them up one by one (a few per round).
    for (size_t i = 0; i < missing.size() && i < 64; ++i) {
      if (store.check_within({keys[i]}, bound)) add(missing[i], store.get_string(keys[i]));
    }
  } catch (const std::exception&) {
    // The store is unreachable: its own errors reach whoever uses it; retried later.
  }
}

std::string PeerWatch::who(const Peer& p) const {
  std::string s = "(pid " + std::to_string(p.pid);
  if (!p.host.empty()) s += " on host '" + p.host + "'";
  return s + ")";
}

void PeerWatch::check_locked(int r, Peer& p, Clock::time_point now) {
  if (!p.failure.empty() || p.pid <= 0) return;
  if (p.pidfd >= 0) {
    pollfd pfd{p.pidfd, POLLIN, 0};
    if (::poll(&pfd, 1, 0) > 0) {
      p.failure = "dead: its process " + who(p) + " exited (seen by its pidfd)";
      return;
    }
  }
  char state = '?';
  uint64_t start = 0;
  if (!read_stat(p.pid, &state, &start) || (p.start != 0 && start != p.start) || state == 'Z' ||
      state == 'X') {
    p.failure = "dead: its process " + who(p) + " exited";
    return;
  }
  // Stopped: judged here for peers of this host; those given another host id (a test's
  // simulated hosts) are judged by their heartbeats, as on another machine.
  if ((state != 'T' && state != 't') || p.host != host_id_) {
    p.stopped_since = {};
    return;
  }
  if (p.stopped_since == Clock::time_point{}) p.stopped_since = now;
  if (stop_timeout_.count() > 0 && now - p.stopped_since >= stop_timeout_) {
    p.failure = "unresponsive: its process " + who(p) +
                " has been stopped (SIGSTOP or a debugger) for " +
                std::to_string(ms_between(p.stopped_since, now)) +
                " ms (TPCOMM_HEARTBEAT_TIMEOUT=" + std::to_string(stop_timeout_.count()) +
                "ms); it is alive but makes no progress";
  }
}

std::vector<std::pair<int, std::string>> PeerWatch::poll() {
  std::vector<std::pair<int, std::string>> out;
  std::lock_guard<std::mutex> lk(mu_);
  auto now = Clock::now();
  for (size_t r = 0; r < peers_.size(); ++r) {
    Peer& p = peers_[r];
    check_locked(static_cast<int>(r), p, now);
    if (!p.failure.empty() && !p.reported) {
      p.reported = true;
      out.emplace_back(static_cast<int>(r), p.failure);
    }
  }
  return out;
}

std::string PeerWatch::failure(int r) {
  std::lock_guard<std::mutex> lk(mu_);
  if (r < 0 || static_cast<size_t>(r) >= peers_.size()) return "";
  Peer& p = peers_[static_cast<size_t>(r)];
  check_locked(r, p, Clock::now());
  return p.failure;
}

std::vector<std::pair<int, std::string>> PeerWatch::failures(std::span<const int> ranks) {
  std::vector<std::pair<int, std::string>> out;
  std::lock_guard<std::mutex> lk(mu_);
  auto now = Clock::now();
  for (int r : ranks) {
    if (r < 0 || static_cast<size_t>(r) >= peers_.size() || r == rank_) continue;
    Peer& p = peers_[static_cast<size_t>(r)];
    check_locked(r, p, now);
    if (!p.failure.empty()) out.emplace_back(r, p.failure);
  }
  return out;
}

void PeerWatch::mark(int r, const std::string& reason) {
  std::lock_guard<std::mutex> lk(mu_);
  if (r < 0 || static_cast<size_t>(r) >= peers_.size()) return;
  Peer& p = peers_[static_cast<size_t>(r)];
  if (p.failure.empty()) p.failure = reason;
  p.reported = true;
}

std::string PeerWatch::state(int r) {
  std::lock_guard<std::mutex> lk(mu_);
  if (r < 0 || static_cast<size_t>(r) >= peers_.size()) return "";
  Peer& p = peers_[static_cast<size_t>(r)];
  auto now = Clock::now();
  check_locked(r, p, now);
  if (!p.failure.empty()) return p.failure;
  if (p.pid <= 0) return "";
  const std::string rank = "rank " + std::to_string(r) + " " + who(p);
  if (p.stopped_since != Clock::time_point{})
    return rank + " is alive but stopped (for " + std::to_string(ms_between(p.stopped_since, now)) +
           " ms)";
  return rank + " is alive and running";
}

bool PeerWatch::local(int r) {
  std::lock_guard<std::mutex> lk(mu_);
  if (r < 0 || static_cast<size_t>(r) >= peers_.size()) return false;
  const Peer& p = peers_[static_cast<size_t>(r)];
  return p.pid > 0 && p.host == host_id_;
}

}  // namespace tpcomm
