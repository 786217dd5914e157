// The shm transport at the link layer (no protocol above it), between two processes: a forked
// peer echoes messages and acknowledges puts. Compared with memcpy measured in the same
// program, on the same buffers.
//
//   bin/shm_transport_bench                                   # everything
//   bin/shm_transport_bench --benchmark_filter='PingPong'     # latency only
//   bin/shm_transport_bench --benchmark_filter='Put|Memcpy'   # bandwidth vs memcpy
//   TPCOMM_SHM_PUT_CHUNK=256M bin/shm_transport_bench ...     # one copy step per put
//
// BM_PingPong/bytes: round trip of one message and its echo; one_way = half of it.
// BM_Put/cma/bytes: puts into the peer's registered buffer (cma 1: process_vm_writev, 0: copied
// through the ring), a window of puts in flight, each acknowledged by the peer once its
// notification arrived (the data is in place); bytes/s counts payload only.
// BM_Memcpy/bytes: single-thread memcpy between two buffers of that size (the reference).
// Every case uses real (wall) time. The best_* counters report the quickest sample (a window
// of puts, a batch of 64 round trips, one memcpy): on a shared machine they show what the
// hardware gives when the other processes leave it alone; the usual columns show the mean.
#include <benchmark/benchmark.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "tpcomm/transport/transport.hpp"

namespace {

using namespace tpcomm;
using namespace tpcomm::transport;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxPut = 256 << 20;

struct Sink : EventSink {
  std::function<void(std::span<const uint8_t>)> on_msg;
  std::function<void(uint32_t)> on_arrived;
  uint64_t messages = 0, done = 0, errors = 0;
  void on_message(int, std::span<const uint8_t> d) override {
    ++messages;
    if (on_msg) on_msg(d);
  }
  void on_put_arrived(int, uint32_t imm) override {
    if (on_arrived) on_arrived(imm);
  }
  void on_put_done(uint64_t, bool) override { ++done; }
  void on_peer_error(int, const std::string&) override { ++errors; }
};

bool write_blob(int fd, const std::vector<uint8_t>& b) {
  uint32_t n = static_cast<uint32_t>(b.size());
  return ::write(fd, &n, 4) == 4 && ::write(fd, b.data(), n) == static_cast<ssize_t>(n);
}

std::vector<uint8_t> read_blob(int fd) {
  uint32_t n = 0;
  if (::read(fd, &n, 4) != 4 || n > (1u << 20)) return {};
  std::vector<uint8_t> b(n);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, b.data() + got, n - got);
    if (r <= 0) return {};
    got += static_cast<size_t>(r);
  }
  return b;
}

TransportContext ctx(int rank) {
  TransportContext c;
  c.rank = rank;
  c.world_size = 2;
  c.job_id = "shm-bench";
  c.timeout = std::chrono::milliseconds(30000);
  return c;
}

// The forked peer: echoes every message, acknowledges every arrived put with its imm. Spins
// while busy, sleeps on wait_fd after a millisecond of quiet, exits when the parent leaves.
[[noreturn]] void peer_main(int rd, int wr) {
  auto t = create_transport("shm", ctx(1));
  std::vector<uint8_t> dst(kMaxPut);
  std::memset(dst.data(), 0, dst.size());
  auto mr = t->register_memory(dst.data(), dst.size(), Device::cpu());
  RemoteKey key = mr->remote_key();
  write_blob(wr, t->address());
  write_blob(wr, {reinterpret_cast<uint8_t*>(&key), reinterpret_cast<uint8_t*>(&key) + sizeof key});
  auto addr = read_blob(rd);
  if (addr.empty()) ::_exit(1);
  Endpoint& ep = t->connect(0, addr, Clock::now() + std::chrono::seconds(30));
  Sink s;
  std::vector<iovec> backlog_iov;
  std::vector<std::vector<uint8_t>> backlog;
  auto reply = [&](std::span<const uint8_t> d) {
    iovec v{const_cast<uint8_t*>(d.data()), d.size()};
    if (backlog.empty() && ep.send({&v, 1}) == PostStatus::Ok) return;
    backlog.emplace_back(d.begin(), d.end());
  };
  s.on_msg = reply;
  s.on_arrived = [&](uint32_t imm) { reply({reinterpret_cast<const uint8_t*>(&imm), sizeof imm}); };
  auto quiet_since = Clock::now();
  while (s.errors == 0) {
    int n = t->progress(s);
    while (!backlog.empty()) {
      iovec v{backlog.front().data(), backlog.front().size()};
      if (ep.send({&v, 1}) != PostStatus::Ok) break;
      backlog.erase(backlog.begin());
    }
    if (n > 0) {
      quiet_since = Clock::now();
    } else if (Clock::now() - quiet_since > std::chrono::milliseconds(1) && t->arm()) {
      pollfd pf{t->wait_fd(), POLLIN, 0};
      ::poll(&pf, 1, 100);
    }
  }
  ::_exit(0);
}

// The parent's side of one pair (with cross-memory puts on or off).
struct Pair {
  std::unique_ptr<Transport> t;
  Endpoint* ep = nullptr;
  RemoteKey key;
  std::vector<uint8_t> src;
  std::unique_ptr<MemoryRegion> mr;
  Sink s;
  pid_t pid = -1;
  uint64_t acks = 0;

  explicit Pair(bool cma) {
    ::setenv("TPCOMM_SHM_CMA", cma ? "1" : "0", 1);
    config::reload();
    int down[2], up[2];
    if (::pipe(down) != 0 || ::pipe(up) != 0) std::abort();
    pid = ::fork();
    if (pid == 0) {
      ::close(down[1]);
      ::close(up[0]);
      peer_main(down[0], up[1]);
    }
    ::close(down[0]);
    ::close(up[1]);
    t = create_transport("shm", ctx(0));
    auto addr = read_blob(up[0]);
    auto kb = read_blob(up[0]);
    if (addr.empty() || kb.size() != sizeof key) std::abort();
    std::memcpy(&key, kb.data(), sizeof key);
    write_blob(down[1], t->address());
    ::close(down[1]);
    ::close(up[0]);
    ep = &t->connect(1, addr, Clock::now() + std::chrono::seconds(30));
    src.assign(kMaxPut, 0x5a);
    mr = t->register_memory(src.data(), src.size(), Device::cpu());
    s.on_msg = [this](std::span<const uint8_t>) { ++acks; };
    while (!ep->ready()) {
      t->progress(s);
      if (s.errors) std::abort();
    }
  }
  ~Pair() {
    t.reset();  // the peer sees our goodbye and exits
    int st;
    ::waitpid(pid, &st, 0);
  }
};

Pair& pair(bool cma) {
  static std::unique_ptr<Pair> pairs[2];
  auto& p = pairs[cma ? 1 : 0];
  if (!p) p = std::make_unique<Pair>(cma);
  return *p;
}

void BM_PingPong(benchmark::State& state) {
  Pair& p = pair(true);
  std::vector<uint8_t> msg(static_cast<size_t>(state.range(0)), 1);
  iovec v{msg.data(), msg.size()};
  constexpr int kBatch = 64;  // round trips per timing sample
  double best = 1e9;
  for (auto _ : state) {
    auto t0 = Clock::now();
    for (int i = 0; i < kBatch; ++i) {
      uint64_t want = p.acks + 1;
      while (p.ep->send({&v, 1}) != PostStatus::Ok) p.t->progress(p.s);
      while (p.acks < want) p.t->progress(p.s);
    }
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  state.counters["one_way"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2 * kBatch,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  // The quietest sample: what the machine gives without the noise of other processes.
  state.counters["best_one_way_us"] = best / (2 * kBatch) * 1e6;
}
BENCHMARK(BM_PingPong)->Arg(8)->Arg(256)->Arg(4096)->Arg(16384)->UseRealTime();

void BM_Put(benchmark::State& state) {
  bool cma = state.range(0) != 0;
  size_t bytes = static_cast<size_t>(state.range(1));
  Pair& p = pair(cma);
  // Enough puts in flight to cover the acknowledgement's round trip.
  int window = static_cast<int>(std::clamp<size_t>((16 << 20) / bytes, 1, 32));
  double best = 1e9;
  for (auto _ : state) {
    auto t0 = Clock::now();
    uint64_t want = p.acks + static_cast<uint64_t>(window);
    for (int i = 0; i < window; ++i) {
      while (p.ep->put(*p.mr, 0, p.key, 0, bytes, static_cast<uint32_t>(i), 0) != PostStatus::Ok) {
        p.t->progress(p.s);
      }
    }
    while (p.acks < want) p.t->progress(p.s);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * window *
                          static_cast<int64_t>(bytes));
  state.counters["best_GBps"] =
      static_cast<double>(window) * static_cast<double>(bytes) / best / 1e9;
}
BENCHMARK(BM_Put)
    ->ArgsProduct({{1, 0}, {64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20}})
    ->UseRealTime();

void BM_Memcpy(benchmark::State& state) {
  size_t bytes = static_cast<size_t>(state.range(0));
  static std::vector<uint8_t> a(kMaxPut, 1), b(kMaxPut, 2);
  double best = 1e9;
  for (auto _ : state) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::ClobberMemory();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  state.counters["best_GBps"] = static_cast<double>(bytes) / best / 1e9;
}
BENCHMARK(BM_Memcpy)
    ->Arg(64 << 10)
    ->Arg(1 << 20)
    ->Arg(4 << 20)
    ->Arg(16 << 20)
    ->Arg(64 << 20)
    ->Arg(256 << 20)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
