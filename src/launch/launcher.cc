// tprun's run loop: one poll() over the workers' output pipes and a self-pipe fed by the
// signal handlers; a failed worker (or SIGINT/SIGTERM/SIGHUP) stops the node's workers with
// the signal, then SIGKILL after the grace period; optional restarts; one summary line.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/cli.h"
#include "core/config.h"
#include "core/deadline.h"
#include "core/log.h"
#include "launch/join_progress.h"
#include "launch/launch_internal.h"
#include "tpcomm/error.hpp"
#include "tpcomm/launch.hpp"

namespace tpcomm::launch {

using detail::ExitStatus;
using detail::LineForwarder;
using detail::UniqueFd;
using detail::Worker;

namespace detail {

std::string random_job_id() {
  std::random_device rd;
  uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace detail

namespace {

// ---- signals: the handlers only write the signal number into a pipe ----------------------

std::atomic<int> g_signal_fd{-1};

extern "C" void on_signal(int sig) {
  int saved = errno;
  int fd = g_signal_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    unsigned char c = static_cast<unsigned char>(sig);
    ssize_t n = ::write(fd, &c, 1);
    (void)n;
  }
  errno = saved;
}

// Installs the handlers for the duration of launch() and restores the previous ones.
class SignalGuard {
 public:
  SignalGuard() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
      throw Error(std::string("tprun: cannot create the signal pipe: ") + strerror(errno));
    read_.reset(fds[0]);
    write_.reset(fds[1]);
    int expected = -1;
    if (!g_signal_fd.compare_exchange_strong(expected, write_.get()))
      throw InvalidArgument("tprun: launch() is already running in this process");
    install(SIGCHLD, false);
    install(SIGTERM, false);
    install(SIGINT, true);  // stays ignored when started ignored (nohup, background jobs)
    install(SIGHUP, true);
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    struct sigaction old {};
    ::sigaction(SIGPIPE, &ign, &old);  // a closed console must not kill tprun
    saved_.emplace_back(SIGPIPE, old);
  }
  ~SignalGuard() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it)
      ::sigaction(it->first, &it->second, nullptr);
    g_signal_fd.store(-1);
  }
  int fd() const { return read_.get(); }

  // Signals received since the last call.
  std::vector<int> take() {
    std::vector<int> out;
    unsigned char buf[64];
    ssize_t n;
    while ((n = ::read(read_.get(), buf, sizeof(buf))) > 0)
      for (ssize_t i = 0; i < n; ++i) out.push_back(buf[i]);
    return out;
  }

 private:
  void install(int sig, bool keep_ignored) {
    struct sigaction old {};
    ::sigaction(sig, nullptr, &old);
    if (keep_ignored && old.sa_handler == SIG_IGN) return;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
    ::sigaction(sig, &sa, nullptr);
    saved_.emplace_back(sig, old);
  }

  UniqueFd read_;
  UniqueFd write_;
  std::vector<std::pair<int, struct sigaction>> saved_;
};

// ---- one attempt ------------------------------------------------------------------------

struct Failure {
  int rank = -1;
  int local_rank = -1;
  pid_t pid = -1;
  ExitStatus status;
  int others_running = 0;  ///< workers still running when it failed (then stopped)
};

struct AttemptResult {
  std::optional<Failure> failure;          ///< first failure, unless tprun was interrupted first
  int interrupt = 0;                       ///< signal tprun received, 0 if none
  std::optional<Failure> after_interrupt;  ///< first worker that ended badly after it
};

struct LogFiles {
  UniqueFd out;
  UniqueFd err;
};

// What stays the same across restarts.
struct Job {
  const Options& o;
  std::string path;
  std::vector<std::string> base_env;
  std::string job_id;
  int master_port = 0;
  std::vector<LogFiles> logs;  // per local rank; empty without --log-dir
  SignalGuard* signals = nullptr;
  bool adopt_orphans = false;  // tprun is a child subreaper: reap what workers leave behind
};

bool has(Streams set, Streams which) {
  return (static_cast<int>(set) & static_cast<int>(which)) != 0;
}

Streams for_rank(const std::map<int, Streams>& per_rank, Streams all, int local) {
  auto it = per_rank.find(local);
  return it == per_rank.end() ? all : it->second;
}

// Whether a worker stream goes to the console: tee wins, then redirects, else yes.
bool to_console(const Options& o, int local, Streams which) {
  if (has(for_rank(o.tee_per_rank, o.tee, local), which)) return true;
  return !has(for_rank(o.redirects_per_rank, o.redirects, local), which);
}

void say(const Options& o, const std::string& line) {
  std::string s = line + "\n";
  detail::write_fully(o.err_fd, s.data(), s.size());
}

std::string who(const Failure& f) {
  return "rank " + std::to_string(f.rank) + " (local " + std::to_string(f.local_rank) + ", pid " +
         std::to_string(f.pid) + ")";
}

std::vector<std::string> worker_env(const Job& job, int local, int restart) {
  const Options& o = job.o;
  int rank = o.node_rank * o.nproc_per_node + local;
  auto kv = [](const char* k, const std::string& v) { return std::string(k) + "=" + v; };
  auto num = [](int v) { return std::to_string(v); };
  std::vector<std::string> ov = {
      kv("RANK", num(rank)),
      kv("LOCAL_RANK", num(local)),
      kv("WORLD_SIZE", num(o.nnodes * o.nproc_per_node)),
      kv("LOCAL_WORLD_SIZE", num(o.nproc_per_node)),
      kv("GROUP_RANK", num(o.node_rank)),
      kv("GROUP_WORLD_SIZE", num(o.nnodes)),
      kv("MASTER_ADDR", o.master_addr),
      kv("MASTER_PORT", num(job.master_port)),
      kv("TPCOMM_JOB_ID", job.job_id),
      kv("TPCOMM_RESTART_COUNT", num(restart)),
      kv("TPCOMM_USE_AGENT_STORE", "1"),
  };
  return detail::merge_env(job.base_env, ov);
}

class Attempt {
 public:
  Attempt(const Job& job, int restart) : job_(job), o_(job.o), restart_(restart) {}

  AttemptResult run() {
    start_workers();
    // On a terminal, the first attempt shows how many ranks have reached init_process_group.
    if (restart_ == 0 && isatty(o_.err_fd) == 1)
      progress_ = std::make_unique<detail::JoinProgress>(
          o_.err_fd, o_.master_addr, job_.master_port, job_.job_id, o_.nnodes * o_.nproc_per_node);
    loop();
    progress_.reset();
    drain_output();
    // Whatever a stopped worker left behind in its group goes too.
    if (stopping_)
      for (auto& w : workers_) w->signal_group(SIGKILL);
    for (auto& w : workers_) w->reap();
    if (job_.adopt_orphans)
      detail::reap_adopted({}, std::chrono::milliseconds(stopping_ ? 500 : 0));
    return result_;
  }

 private:
  void start_workers() {
    std::vector<std::string> argv;
    argv.push_back(o_.program);
    argv.insert(argv.end(), o_.args.begin(), o_.args.end());
    std::vector<int> cpus;
    if (o_.bind_to_core) {
      cpus = detail::usable_cpus();
      if (cpus.empty()) {
        TPLOG(WARN, LAUNCH) << "tprun: --bind-to core: cannot read this process's CPU set "
                               "(sched_getaffinity); workers run unbound";
      } else if (static_cast<size_t>(o_.nproc_per_node) > cpus.size()) {
        TPLOG(WARN, LAUNCH) << "tprun: --bind-to core: " << o_.nproc_per_node << " workers share "
                            << cpus.size() << " CPUs (bound round-robin)";
      }
    }
    for (int local = 0; local < o_.nproc_per_node; ++local) {
      int rank = o_.node_rank * o_.nproc_per_node + local;
      int cpu = cpus.empty() ? -1 : cpus[static_cast<size_t>(local) % cpus.size()];
      // On failure the Workers already started are killed and reaped by their destructors.
      workers_.push_back(std::make_unique<Worker>(local, rank, job_.path, argv,
                                                  worker_env(job_, local, restart_), cpu));
      std::string prefix = o_.prefix_output ? "[rank " + std::to_string(rank) + "]: " : "";
      int fout = job_.logs.empty() ? -1 : job_.logs[local].out.get();
      int ferr = job_.logs.empty() ? -1 : job_.logs[local].err.get();
      out_.emplace_back(prefix, to_console(o_, local, Streams::Out) ? o_.out_fd : -1, fout);
      err_.emplace_back(prefix, to_console(o_, local, Streams::Err) ? o_.err_fd : -1, ferr);
    }
  }

  void signal_all(int sig) {
    for (auto& w : workers_) w->signal_group(sig);
  }

  int running() const {
    int n = 0;
    for (const auto& w : workers_) n += w->exited() ? 0 : 1;
    return n;
  }

  void begin_stop(int sig) {
    stopping_ = true;
    kill_at_ = Deadline::after(o_.grace);
    signal_all(sig);
  }

  void kill_now() {
    signal_all(SIGKILL);
    killed_ = true;
    give_up_ = Deadline::after(std::chrono::seconds(5));
  }

  void check_exits() {
    std::vector<Worker*> ended;
    for (auto& w : workers_)
      if (!w->exited() && w->check_exit()) ended.push_back(w.get());
    for (Worker* w : ended) {
      if (w->status().ok()) continue;
      Failure f{w->rank(), w->local_rank(), w->pid(), w->status(), running()};
      if (result_.interrupt) {
        if (!result_.after_interrupt) result_.after_interrupt = f;
      } else if (!result_.failure) {
        result_.failure = f;
        TPLOG(INFO, LAUNCH) << "tprun: " << who(f) << " failed (" << f.status.describe()
                            << "); stopping the " << f.others_running << " others";
        if (!stopping_) begin_stop(SIGTERM);
      }
    }
  }

  void handle_signal(int sig) {
    if (sig == SIGCHLD) return;
    if (progress_) progress_->hide();
    if (!result_.interrupt) {
      result_.interrupt = sig;
      int n = running();
      say(o_, "tprun: received " + detail::signal_name(sig) + "; forwarding it to the " +
                  std::to_string(n) + (n == 1 ? " running worker" : " running workers") +
                  " (SIGKILL after " + std::to_string(o_.grace.count()) +
                  " ms; a second signal kills them now)");
      if (!stopping_) {  // a failure's grace period already running is not extended
        stopping_ = true;
        kill_at_ = Deadline::after(o_.grace);
      }
      signal_all(sig);
    } else if (!killed_) {
      say(o_, "tprun: received " + detail::signal_name(sig) + " again; killing the workers");
      kill_now();
    }
  }

  // Reads what is available on one pipe; closes it at EOF.
  void pump(UniqueFd& fd, LineForwarder& fwd) {
    char buf[64 * 1024];
    for (int i = 0; i < 16; ++i) {  // bounded, so one chatty worker cannot starve the rest
      ssize_t n = ::read(fd.get(), buf, sizeof(buf));
      if (n > 0) {
        fwd.feed(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      fwd.finish();
      fd.reset();
      return;
    }
  }

  // One poll() over the signal pipe (when with_signals) and the open output pipes.
  void poll_once(int timeout_ms, bool with_signals) {
    std::vector<pollfd> fds;
    std::vector<std::pair<UniqueFd*, LineForwarder*>> pipes;
    if (with_signals) fds.push_back({job_.signals->fd(), POLLIN, 0});
    for (size_t i = 0; i < workers_.size(); ++i) {
      for (auto [fd, fwd] :
           {std::pair{&workers_[i]->out(), &out_[i]}, std::pair{&workers_[i]->err(), &err_[i]}}) {
        if (!fd->valid()) continue;
        fds.push_back({fd->get(), POLLIN, 0});
        pipes.emplace_back(fd, fwd);
      }
    }
    int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (rc <= 0) return;  // timeout, or EINTR: the caller loops
    size_t k = 0;
    if (with_signals) {
      if (fds[0].revents)
        for (int sig : job_.signals->take()) handle_signal(sig);
      k = 1;
    }
    for (size_t j = 0; j < pipes.size(); ++j) {
      if (!fds[k + j].revents) continue;
      if (progress_) progress_->hide();  // worker lines never land behind the progress line
      pump(*pipes[j].first, *pipes[j].second);
    }
  }

  void loop() {
    while (true) {
      check_exits();
      if (job_.adopt_orphans) {
        std::vector<pid_t> keep;
        for (auto& w : workers_) keep.push_back(w->pid());
        detail::reap_adopted(keep, std::chrono::milliseconds(0));
      }
      if (running() == 0) return;
      if (stopping_ && !killed_ && kill_at_.expired()) {
        TPLOG(INFO, LAUNCH) << "tprun: " << running() << " workers still running after "
                            << o_.grace.count() << " ms; sending SIGKILL";
        kill_now();
      }
      if (killed_ && give_up_.expired()) {
        say(o_, "tprun: " + std::to_string(running()) +
                    " workers did not die within 5 s of SIGKILL; giving up on them");
        return;
      }
      if (progress_) progress_->tick();
      int timeout = 250;  // backstop; SIGCHLD wakes the poll sooner
      if (stopping_ && !killed_) timeout = std::min(timeout, kill_at_.poll_timeout_ms());
      if (killed_) timeout = std::min(timeout, give_up_.poll_timeout_ms());
      poll_once(timeout, true);
    }
  }

  // After the workers exited: read what is left in the pipes (bounded: something the worker
  // started in the background may hold them open), then flush partial lines.
  void drain_output() {
    Deadline until = Deadline::after(std::chrono::milliseconds(500));
    auto open_pipes = [&] {
      for (auto& w : workers_)
        if (w->out().valid() || w->err().valid()) return true;
      return false;
    };
    while (open_pipes() && !until.expired()) poll_once(until.poll_timeout_ms(), false);
    // Signals that came in meanwhile (a late SIGINT) still count for the exit status.
    for (int sig : job_.signals->take())
      if (sig != SIGCHLD && !result_.interrupt) result_.interrupt = sig;
    for (size_t i = 0; i < workers_.size(); ++i) {
      out_[i].finish();
      err_[i].finish();
      workers_[i]->out().reset();
      workers_[i]->err().reset();
    }
  }

  const Job& job_;
  const Options& o_;
  int restart_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<LineForwarder> out_;
  std::vector<LineForwarder> err_;
  std::unique_ptr<detail::JoinProgress> progress_;
  AttemptResult result_;
  bool stopping_ = false;
  bool killed_ = false;
  Deadline kill_at_ = Deadline::never();
  Deadline give_up_ = Deadline::never();
};

// ---- setup ------------------------------------------------------------------------------

void check_options(const Options& o) {
  auto bad = [](const std::string& what) {
    throw InvalidArgument("tprun: " + what + "; run 'tprun --help' for usage");
  };
  if (o.program.empty()) bad("no program to run");
  if (o.nproc_per_node < 1) bad("nproc_per_node must be >= 1");
  if (o.nnodes < 1) bad("nnodes must be >= 1");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    bad("node_rank " + std::to_string(o.node_rank) + " is out of range for " +
        std::to_string(o.nnodes) + " nodes");
  if (o.master_port < 0 || o.master_port > 65535)
    bad("master_port " + std::to_string(o.master_port) + " is not in 0..65535");
  if (o.master_port == 0 && o.nnodes > 1) bad("master_port 0 (a free port) works only on one node");
  if (o.max_restarts < 0) bad("max_restarts must be >= 0");
  if (o.grace.count() < 0) bad("the grace period must be >= 0");
  if (o.master_addr.empty()) bad("master_addr is empty");
}

// Without a given id: random on one node; on several, one every node derives alike.
std::string choose_job_id(const Options& o) {
  if (!o.job_id.empty()) return o.job_id;
  if (o.nnodes == 1) return detail::random_job_id();
  uint64_t h = 1469598103934665603ull;
  for (char c : o.master_addr + ":" + std::to_string(o.master_port)) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  char buf[24];
  std::snprintf(buf, sizeof(buf), "tprun-%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void make_dirs(const std::string& path) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      throw Error("tprun: cannot create log directory '" + cur + "': " + strerror(errno) +
                  "; check --log-dir");
  }
}

std::vector<LogFiles> open_logs(const Options& o) {
  std::vector<LogFiles> logs;
  if (o.log_dir.empty()) return logs;
  for (int local = 0; local < o.nproc_per_node; ++local) {
    std::string dir = o.log_dir + "/rank_" + std::to_string(o.node_rank * o.nproc_per_node + local);
    make_dirs(dir);
    LogFiles f;
    for (auto [fd, name] : {std::pair{&f.out, "stdout.log"}, std::pair{&f.err, "stderr.log"}}) {
      std::string p = dir + "/" + name;
      int raw = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
      if (raw < 0)
        throw Error("tprun: cannot open log file '" + p + "': " + strerror(errno) +
                    "; check --log-dir");
      fd->reset(raw);
    }
    logs.push_back(std::move(f));
  }
  return logs;
}

std::string failure_line(const Options& o, const Failure& f) {
  std::string s = "tprun: " + who(f) + " failed: " + f.status.describe();
  if (f.others_running > 0) {
    s += f.others_running == 1
             ? "; stopped the other worker"
             : "; stopped the other " + std::to_string(f.others_running) + " workers";
  } else if (o.nproc_per_node > 1) {
    s += "; the other workers had already exited";
  }
  return s;
}

}  // namespace

int launch(const Options& options) { return detail::run_job(options, false); }

int detail::run_job(const Options& options, bool adopt_orphans) {
  check_options(options);
  Job job{options};
  job.adopt_orphans = adopt_orphans;
  job.path = detail::find_program(options.program, config::get_string("PATH"));
  job.job_id = choose_job_id(options);
  job.logs = open_logs(options);
  SignalGuard signals;
  job.signals = &signals;
  std::unique_ptr<detail::StoreHost> store;
  job.master_port = options.master_port;
  if (options.node_rank == 0 && !options.external_store) {
    store =
        std::make_unique<detail::StoreHost>(options.master_addr, options.master_port, job.job_id);
    job.master_port = store->port();
  }
  job.base_env = config::environment();
  TPLOG(INFO, LAUNCH) << "tprun: node " << options.node_rank << "/" << options.nnodes << ", "
                      << options.nproc_per_node << " workers, master " << options.master_addr << ":"
                      << job.master_port << ", job " << job.job_id;

  for (int restart = 0;; ++restart) {
    if (restart > 0)
      for (LogFiles& f : job.logs)
        for (UniqueFd* fd : {&f.out, &f.err}) {
          std::string mark = "---- tprun: restart " + std::to_string(restart) + " ----\n";
          detail::write_fully(fd->get(), mark.data(), mark.size());
        }
    AttemptResult r = Attempt(job, restart).run();
    if (r.failure && !r.interrupt && restart < options.max_restarts) {
      int n = options.nproc_per_node;
      say(options,
          failure_line(options, *r.failure) + "; restarting " +
              (n == 1 ? std::string("the worker") : "all " + std::to_string(n) + " workers") +
              " of this node (restart " + std::to_string(restart + 1) + " of " +
              std::to_string(options.max_restarts) + ")");
      continue;
    }
    if (r.failure) {
      std::string line = failure_line(options, *r.failure);
      if (options.max_restarts > 0)
        line += "; gave up after " + std::to_string(restart) + " restarts (--max-restarts " +
                std::to_string(options.max_restarts) + ")";
      say(options, line);
      return r.failure->status.shell_status();
    }
    if (r.interrupt) {
      if (!r.after_interrupt) return 0;
      const Failure& f = *r.after_interrupt;
      say(options, "tprun: stopped on " + detail::signal_name(r.interrupt) + "; " + who(f) +
                       " ended with " + f.status.describe());
      return f.status.shell_status();
    }
    return 0;
  }
}

int main(int argc, const char* const* argv) {
  std::string prog = argc > 0 && argv[0] ? argv[0] : "tprun";
  prog = prog.substr(prog.rfind('/') + 1);
  auto print = [](int fd, const std::string& s) { detail::write_fully(fd, s.data(), s.size()); };
  try {
    Options o = parse_args(argc, argv);
    if (o.help) {
      print(o.out_fd, usage(prog));
      return 0;
    }
    if (o.version) {
      print(o.out_fd, cli::version_line(prog) + "\n");
      return 0;
    }
    // Processes a worker leaves behind are reparented to tprun, which reaps them, rather
    // than to an init that might not. Only when this process has no children yet: called
    // in-process (tests), other children are not tprun's to reap.
    siginfo_t info{};
    bool childless = ::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 && errno == ECHILD;
    int was_subreaper = 0;
    ::prctl(PR_GET_CHILD_SUBREAPER, &was_subreaper);
    bool adopt = childless && ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
    struct Restore {
      bool on;
      int was;
      ~Restore() {
        if (on) ::prctl(PR_SET_CHILD_SUBREAPER, was);
      }
    } restore{adopt, was_subreaper};
    return detail::run_job(o, adopt);
  } catch (const InvalidArgument& e) {
    print(2, std::string(e.what()) + "\n");
    return 2;
  } catch (const std::exception& e) {
    print(2, "tprun: error: " + std::string(e.what()) + "\n");
    return 1;
  } catch (...) {
    print(2, "tprun: error: an unknown exception\n");
    return 1;
  }
}

}  // namespace tpcomm::launch
