// The flight recorder: rings, the registry of live rings, dump files, the SIGUSR1 path.
#include "pg/flight_recorder.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "core/config.h"
#include "core/log.h"
#include "pg/engine_comm.h"
#include "pg/group_state.h"
#include "tpcomm/error.hpp"
#include "tpcomm/types.hpp"

namespace tpcomm::detail::fr {
namespace {

// Bytes of a ring faulted in when it is made (Ring::Ring).
constexpr size_t kPrefaultBytes = 256 << 10;

uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Process-wide state: the live rings, the clock calibration, the signal path.
struct Registry {
  std::mutex mu;
  std::vector<std::weak_ptr<Ring>> rings;
  std::mutex dump_mu;    // one dump at a time (files are replaced whole)
  pid_t signal_pid = 0;  // the process that installed the handler (fork check)
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: the signal thread may outlive main
  return *r;
}

std::atomic<int> g_signal_fd{-1};

void on_sigusr1(int) {
  int saved = errno;
  int fd = g_signal_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    char c = 1;
    ssize_t n = ::write(fd, &c, 1);
    (void)n;
  }
  errno = saved;
}

void signal_thread(int fd) {
  char buf[64];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    try {
      dump_flight_recorder("SIGUSR1");
    } catch (const std::exception& e) {
      TPLOG(WARN, COLL) << "flight recorder: dump on SIGUSR1 failed: " << e.what();
    }
  }
}

// Installs the SIGUSR1 handler and its dump thread once per process (again after a fork),
// only where SIGUSR1 still has its default action (a program's own handler is kept).
void install_signal(Registry& r) {
  pid_t me = getpid();
  if (r.signal_pid == me) return;
  r.signal_pid = me;
  struct sigaction old {};
  if (sigaction(SIGUSR1, nullptr, &old) != 0) return;
  bool ours = old.sa_handler == on_sigusr1;
  if (!ours && (old.sa_flags & SA_SIGINFO || old.sa_handler != SIG_DFL)) {
    TPLOG(INFO, COLL) << "flight recorder: SIGUSR1 has a handler already; no dump on SIGUSR1";
    return;
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  try {
    std::thread(signal_thread, fds[0]).detach();
  } catch (const std::exception&) {
    close(fds[0]);
    close(fds[1]);
    return;
  }
  g_signal_fd.store(fds[1]);
  if (!ours) {
    struct sigaction sa {};
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, nullptr);
  }
}

const char* state_name(uint8_t s) {
  switch (static_cast<State>(s)) {
    case State::Enqueued:
      return "enqueued";
    case State::Started:
      return "started";
    case State::Completed:
      return "completed";
    case State::Failed:
      return "failed";
    default:
      return "free";
  }
}

// One line of text: newlines and tabs become spaces.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return s;
}

bool write_file(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

// mkdir -p.
bool make_dirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    std::string part = dir.substr(0, i);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st {};
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Dumps the rings of world rank `only_rank` (-1: every world rank of the process).
std::vector<std::string> dump(const std::string& reason, int only_rank) {
  Registry& r = registry();
  std::lock_guard<std::mutex> dlk(r.dump_mu);
  std::vector<std::shared_ptr<Ring>> live;
  {
    std::lock_guard<std::mutex> lk(r.mu);
    for (auto& w : r.rings)
      if (auto p = w.lock())
        if (only_rank < 0 || p->meta().world_rank == only_rank) live.push_back(std::move(p));
  }
  std::vector<std::string> paths;
  if (live.empty()) return paths;
  const uint64_t ns1 = realtime_ns();
  const int64_t to_wall = static_cast<int64_t>(ns1) - Ring::steady_ns();
  std::map<int, std::vector<Ring*>> by_rank;
  for (auto& p : live) by_rank[p->meta().world_rank].push_back(p.get());
  std::string dir = dump_dir();
  if (!make_dirs(dir)) {
    TPLOG(WARN, COLL) << "flight recorder: cannot create the dump directory '" << dir << "' (errno "
                      << errno << "); set TPCOMM_FLIGHT_RECORDER_DIR";
    return paths;
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string job = config::get_string("TPCOMM_JOB_ID");
  if (job.empty()) job = "default";
  for (auto& [rank, rings] : by_rank) {
    std::string out = "tpcomm-flight-recorder v1\n";
    out += "rank " + std::to_string(rank) + "\n";
    out += "world_size " + std::to_string(rings[0]->meta().world_size) + "\n";
    out += "host " + one_line(host_identity()) + "\n";
    out += "hostname " + one_line(host) + "\n";
    out += "pid " + std::to_string(getpid()) + "\n";
    out += "job " + one_line(job) + "\n";
    out += "time_ns " + std::to_string(ns1) + "\n";
    out += "reason " + one_line(reason) + "\n";
    for (Ring* ring : rings) ring->format(out, to_wall);
    out += "end\n";
    std::string path = dir + "/rank" + std::to_string(rank) + ".trace";
    if (write_file(path, out)) {
      paths.push_back(path);
      // On the console whatever TPCOMM_DEBUG says: the dump is what a user looks at next.
      log::notice_once("flight recorder: rank " + std::to_string(rank) + " dumped to " + path +
                       " (" + one_line(reason.substr(0, reason.find(':'))) + "); 'tpinfo --trace " +
                       dir + "' merges the ranks' dumps");
    } else {
      TPLOG(WARN, COLL) << "flight recorder: cannot write " << path << " (errno " << errno << ")";
    }
  }
  return paths;
}

}  // namespace

int64_t Ring::steady_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

Ring::Ring(Meta meta, size_t entries) : meta_(std::move(meta)) {
  size_t n = 1;
  while (n < entries) n <<= 1;
  e_ = static_cast<Entry*>(std::calloc(n, sizeof(Entry)));
  if (!e_) throw std::bad_alloc();
  mask_ = n - 1;
  // Fault in the first pages now (the whole default ring of 2048 entries, 112 KiB): else the
  // group's first collectives take a page fault every 73 calls (1-4 us each), about 0.05 us
  // on each 8-byte all_reduce of a short run. Larger rings keep their untouched tail free.
  const size_t warm = std::min<size_t>(n * sizeof(Entry), kPrefaultBytes);
  auto* bytes = reinterpret_cast<volatile uint8_t*>(e_);
  for (size_t off = 0; off < warm; off += 4096) bytes[off] = 0;
}

Ring::~Ring() { std::free(e_); }

void Ring::format(std::string& out, int64_t to_wall_ns) const {
  const uint64_t next = next_.load(std::memory_order_relaxed);
  const uint64_t n = mask_ + 1;
  const uint64_t first = next > n ? next - n : 0;
  std::string ranks;
  for (size_t i = 0; i < meta_.ranks.size(); ++i)
    ranks += (i ? "," : "") + std::to_string(meta_.ranks[i]);
  char id[17];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(meta_.group_id));
  out += std::string("group id=") + id + " name=" + one_line(meta_.group_name) +
         " group_rank=" + std::to_string(meta_.group_rank) + " ranks=" + ranks +
         " capacity=" + std::to_string(n) + " recorded=" + std::to_string(next) + "\n";
  for (uint64_t i = first; i < next; ++i) {
    const Entry& e = e_[i & mask_];
    uint8_t st =
        std::atomic_ref<uint8_t>(const_cast<uint8_t&>(e.state)).load(std::memory_order_acquire);
    if (st == static_cast<uint8_t>(State::Free)) continue;
    out += "op seq=" + std::to_string(e.seq) + " op=" + op_of_code(e.op);
    if (e.dtype != 0xFF && e.count >= 0) {
      out +=
          std::string(" dtype=") + dtype_name(static_cast<DType>(e.dtype)) +
          " count=" + std::to_string(e.count) + " bytes=" +
          std::to_string(static_cast<uint64_t>(e.count) * dtype_size(static_cast<DType>(e.dtype)));
    }
    if (e.root >= 0) out += " root=" + std::to_string(e.root);
    if (e.redop >= 0)
      out += std::string(" redop=") + reduce_op_name(static_cast<ReduceOp>(e.redop));
    if (e.algo) out += std::string(" algo=") + e.algo;
    out += std::string(" state=") + state_name(st);
    out += " start_ns=" + std::to_string(e.start_ns + to_wall_ns);
    if (e.end_ns) out += " end_ns=" + std::to_string(e.end_ns + to_wall_ns);
    out += "\n";
  }
}

std::string dump_dir() {
  std::string d = config::get_string("TPCOMM_FLIGHT_RECORDER_DIR");
  if (!d.empty()) {
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    return d;
  }
  std::string job = config::get_string("TPCOMM_JOB_ID");
  if (job.empty()) job = "default";
  for (char& c : job)
    if (c == '/' || c == ' ') c = '_';
  return "/tmp/tpcomm_trace_" + job;
}

std::shared_ptr<Ring> make_ring(Ring::Meta meta) {
  int64_t n = config::get_int("TPCOMM_FLIGHT_RECORDER");
  if (n <= 0) return nullptr;
  auto ring = std::make_shared<Ring>(std::move(meta), static_cast<size_t>(n));
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  r.rings.erase(std::remove_if(r.rings.begin(), r.rings.end(),
                               [](const std::weak_ptr<Ring>& w) { return w.expired(); }),
                r.rings.end());
  r.rings.push_back(ring);
  install_signal(r);
  return ring;
}

void on_error(Ring& ring, std::exception_ptr error) {
  std::string reason;
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& e) {
    reason = std::string("TimeoutError: ") + e.what();
  } catch (const MismatchError& e) {
    reason = std::string("MismatchError: ") + e.what();
  } catch (const PeerError& e) {
    reason = std::string("PeerError: ") + e.what();
  } catch (...) {
    return;
  }
  if (!ring.first_error_dump()) return;
  try {
    dump(reason, ring.meta().world_rank);
  } catch (const std::exception& e) {
    TPLOG(WARN, COLL) << "flight recorder: dump failed: " << e.what();
  }
}

std::vector<std::string> dump_flight_recorder(const std::string& reason) {
  return dump(reason, -1);
}

}  // namespace tpcomm::detail::fr
