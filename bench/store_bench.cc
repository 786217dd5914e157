// TCPStore micro-benchmarks, measured as peers/torch_bench.py measures PyTorch's TCPStore:
// the server runs in a separate process (forked before any thread exists), clients are
// threads of this process, each with its own TCPStore connection.
//   setget/clients:K   set+get pairs of 16-byte values, keys cycling over 16 per client;
//                      counter pairs_per_s (all clients together) and us_per_pair.
//   barrier/clients:N  each client does add(ctr, 1); the one that reads N sets a done key,
//                      the others wait([done]). Round time = last release - first arrival;
//                      counters median_us and p90_us over the rounds (first is a warm-up).
// CPU counters (cpu_us_per_pair, server_cpu_*) show the cost of the work independently of
// how much of a shared machine the run got.
#include <benchmark/benchmark.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "store/tcp_store_server.h"
#include "tpcomm/error.hpp"
#include "tpcomm/store.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

uint16_t g_port = 0;
pid_t g_server = -1;
double g_seconds = 1.5;

// Forks the server process; returns its port (0 on failure).
uint16_t start_server() {
  int fds[2];
  if (::pipe(fds) != 0) return 0;
  g_server = ::fork();
  if (g_server < 0) return 0;
  if (g_server == 0) {
    ::close(fds[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    int code = 0;
    try {
      tpcomm::TCPStoreServer server(
          tpcomm::TCPStoreServerConfig::from_registry("127.0.0.1", 0, ""));
      uint16_t port = server.port();
      if (::write(fds[1], &port, sizeof(port)) != sizeof(port)) _exit(1);
      ::close(fds[1]);
      int sig;
      sigwait(&set, &sig);
      server.stop();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "store_bench: server: %s\n", e.what());
      code = 1;
    }
    _exit(code);
  }
  ::close(fds[1]);
  uint16_t port = 0;
  if (::read(fds[0], &port, sizeof(port)) != sizeof(port)) port = 0;
  ::close(fds[0]);
  return port;
}

void stop_server() {
  if (g_server <= 0) return;
  ::kill(g_server, SIGTERM);
  int status;
  ::waitpid(g_server, &status, 0);
  g_server = -1;
}

// CPU time (user + system, ms) used so far by process `pid` (10 ms resolution).
double cpu_ms(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (!f) return 0;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');
  unsigned long ut = 0, st = 0;
  // Fields after the command: state(3) ... utime(14) stime(15).
  if (!p ||
      std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
    return 0;
  return static_cast<double>(ut + st) * 1000.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Runs fn(i) for i in [0, n) on n threads with small stacks (thousands of them).
void run_threads(int n, const std::function<void(int)>& fn) {
  struct Arg {
    const std::function<void(int)>* fn;
    int i;
  };
  std::vector<pthread_t> ts(n);
  std::vector<Arg> args(n);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  for (int i = 0; i < n; ++i) {
    args[i] = {&fn, i};
    int rc = pthread_create(
        &ts[i], &attr,
        [](void* p) -> void* {
          auto* a = static_cast<Arg*>(p);
          (*a->fn)(a->i);
          return nullptr;
        },
        &args[i]);
    if (rc != 0) {
      std::fprintf(stderr, "store_bench: pthread_create failed for thread %d\n", i);
      std::abort();
    }
  }
  pthread_attr_destroy(&attr);
  for (auto& t : ts) pthread_join(t, nullptr);
}

// n clients, connected in parallel.
std::vector<std::unique_ptr<tpcomm::TCPStore>> connect_clients(int n) {
  std::vector<std::unique_ptr<tpcomm::TCPStore>> cs(n);
  int workers = std::min(n, 16);
  run_threads(workers, [&](int w) {
    for (int i = w; i < n; i += workers)
      cs[i] = std::make_unique<tpcomm::TCPStore>("127.0.0.1", g_port, -1, false, 120s);
  });
  return cs;
}

void bm_setget(benchmark::State& state) {
  const int k = static_cast<int>(state.range(0));
  auto clients = connect_clients(k);
  const tpcomm::Bytes value = tpcomm::to_bytes("0123456789abcdef");
  for (auto _ : state) {
    std::vector<int64_t> counts(k, 0);
    std::atomic<bool> bad{false};
    std::barrier start(k + 1);
    Clock::time_point stop_at;
    std::atomic<bool> go{false};
    Clock::time_point t0;
    auto body = [&](int j) {
      auto& st = *clients[j];
      std::vector<std::string> keys;
      for (int i = 0; i < 16; ++i)
        keys.push_back("sg/" + std::to_string(k) + "/" + std::to_string(j) + "/" +
                       std::to_string(i));
      st.set(keys[0], value);  // warm-up
      st.get(keys[0]);
      start.arrive_and_wait();
      while (!go.load(std::memory_order_acquire)) {
      }
      int64_t c = 0;
      Clock::time_point end = stop_at;
      while (true) {
        const std::string& key = keys[c & 15];
        st.set(key, value);
        if (st.get(key) != value) bad = true;
        ++c;
        if ((c & 7) == 0 && Clock::now() >= end) break;
      }
      counts[j] = c;
    };
    std::thread coord([&] {
      start.arrive_and_wait();
      t0 = Clock::now();
      stop_at = t0 + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(g_seconds));
      go.store(true, std::memory_order_release);
    });
    double server0 = cpu_ms(g_server), self0 = cpu_ms(::getpid());
    run_threads(k, body);
    coord.join();
    double server_ms = cpu_ms(g_server) - server0, self_ms = cpu_ms(::getpid()) - self0;
    double el = std::chrono::duration<double>(Clock::now() - t0).count();
    if (bad) state.SkipWithError("get returned a wrong value");
    int64_t pairs = 0;
    for (auto c : counts) pairs += c;
    state.SetIterationTime(el);
    state.counters["pairs_per_s"] = static_cast<double>(pairs) / el;
    state.counters["us_per_pair"] = el * 1e6 / (static_cast<double>(pairs) / k);
    // CPU per pair (clients + server): what a busy, shared machine divides among its users.
    state.counters["cpu_us_per_pair"] = (server_ms + self_ms) * 1e3 / static_cast<double>(pairs);
    state.counters["server_cpu_us_per_pair"] = server_ms * 1e3 / static_cast<double>(pairs);
  }
}

void bm_barrier(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const int rounds = n >= 4096 ? 6 : n >= 1024 ? 11 : 31;  // the first is a warm-up
  auto clients = connect_clients(n);
  static std::atomic<int> run_id{0};
  for (auto _ : state) {
    int id = run_id++;
    std::vector<std::vector<Clock::time_point>> t_in(rounds, std::vector<Clock::time_point>(n));
    std::vector<std::vector<Clock::time_point>> t_out(rounds, std::vector<Clock::time_point>(n));
    std::barrier sync(n);
    std::atomic<bool> failed{false};
    double server0 = cpu_ms(g_server);
    run_threads(n, [&](int j) {
      auto& st = *clients[j];
      for (int r = 0; r < rounds; ++r) {
        std::string base = "bar/" + std::to_string(id) + "/" + std::to_string(r);
        std::string ctr = base + "/ctr", done = base + "/done";
        sync.arrive_and_wait();
        t_in[r][j] = Clock::now();
        try {
          if (st.add(ctr, 1) == n) {
            st.set(done, std::string_view("1"));
          } else {
            st.wait({done});
          }
        } catch (const tpcomm::Error& e) {
          std::fprintf(stderr, "store_bench: barrier client %d: %s\n", j, e.what());
          failed = true;
        }
        t_out[r][j] = Clock::now();
      }
    });
    double server_ms = cpu_ms(g_server) - server0;
    if (failed) {
      state.SkipWithError("a barrier client failed");
      break;
    }
    std::vector<double> us, spread, release;
    auto us_between = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double, std::micro>(b - a).count();
    };
    for (int r = 1; r < rounds; ++r) {
      auto [first, last_in] = std::minmax_element(t_in[r].begin(), t_in[r].end());
      auto [first_out, last] = std::minmax_element(t_out[r].begin(), t_out[r].end());
      us.push_back(us_between(*first, *last));
      spread.push_back(us_between(*first, *last_in));
      release.push_back(us_between(*first_out, *last));
    }
    std::sort(us.begin(), us.end());
    std::sort(spread.begin(), spread.end());
    std::sort(release.begin(), release.end());
    // Medians of: how long this harness takes to let its own threads into a round (part of
    // the measured time, not the store's), and from the first client released to the last.
    state.counters["arrival_spread_us"] = spread[spread.size() / 2];
    state.counters["release_spread_us"] = release[release.size() / 2];
    double median = us[us.size() / 2];
    double p90 = us[std::min(us.size() - 1, static_cast<size_t>(0.9 * us.size()))];
    state.SetIterationTime(median * 1e-6);
    state.counters["median_us"] = median;
    state.counters["p90_us"] = p90;
    state.counters["rounds"] = static_cast<double>(us.size());
    state.counters["server_cpu_ms_per_round"] = server_ms / rounds;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Thousands of clients: one descriptor each here and in the server (which inherits this).
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  std::vector<int> barrier_sizes = {1, 32, 64, 256, 1024, 4096};
  if (rl.rlim_cur < 4096 + 256) barrier_sizes.pop_back();
  if (const char* s = std::getenv("STORE_BENCH_SECONDS")) g_seconds = std::atof(s);
  g_port = start_server();
  if (g_port == 0) {
    std::fprintf(stderr, "store_bench: could not start the server process\n");
    stop_server();
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  for (int k : {1, 32}) {
    benchmark::RegisterBenchmark("setget", bm_setget)
        ->Arg(k)
        ->ArgName("clients")
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (int n : barrier_sizes) {
    benchmark::RegisterBenchmark("barrier", bm_barrier)
        ->Arg(n)
        ->ArgName("clients")
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  stop_server();
  return 0;
}
