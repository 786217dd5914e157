// One-sided put bandwidth at the link layer between two forked processes, measured like
// ucx_perftest's ucp_put_bw: the initiator streams `count` puts of one size into the
// same place of the target's region, a window of W in flight (posting the next as soon as one
// completes), and times from the first post to the last completion. Unlike put_bw, every
// tpcomm put also carries its notification (on_put_arrived at the target), and completes only
// once it was sent. Both regions come from Transport::allocate_memory, as put_bw's from
// ucp_mem_map ALLOCATE (the source is filled, so the copies read real pages).
//
//   TPCOMM_UCX_TLS=shm bin/put_bench --transport ucx --min 1M --max 64M --window 32 --pin
//   bin/put_bench --transport ucx --user-dst ...    # the target registers its own memory
//
// --user-dst: the target's region is ordinary memory it registered (what a tensor is), not an
// allocation of the transport. --pin: initiator on CPU 0, target on CPU 1. --samples N (5):
// timed samples per size after one untimed window; the median and the best are printed.
// --csv: "transport,size,window,count,median_GBps,best_GBps,dst". GB/s = 1e9 bytes/s.
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tpcomm/error.hpp"
#include "tpcomm/store.hpp"
#include "tpcomm/transport/transport.hpp"

namespace {

using namespace tpcomm;
using namespace tpcomm::transport;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string transport = "ucx";
  size_t min = 1 << 20, max = 64 << 20;
  int window = 32;
  int count = 0;  // 0: enough for about 256 MiB per sample (32..1000 puts)
  int samples = 5;
  bool user_dst = false, pin = false, csv = false;
};

size_t parse_size(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  size_t mul = 1;
  if (end && (*end == 'K' || *end == 'k')) mul = 1 << 10;
  if (end && (*end == 'M' || *end == 'm')) mul = 1 << 20;
  if (end && (*end == 'G' || *end == 'g')) mul = 1 << 30;
  if (end == s || v <= 0) {
    std::fprintf(stderr, "put_bench: bad size '%s'\n", s);
    std::exit(2);
  }
  return static_cast<size_t>(v * static_cast<double>(mul));
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "put_bench: %s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--transport")
      a.transport = next();
    else if (s == "--min")
      a.min = parse_size(next());
    else if (s == "--max")
      a.max = parse_size(next());
    else if (s == "--window")
      a.window = std::atoi(next());
    else if (s == "--count")
      a.count = std::atoi(next());
    else if (s == "--samples")
      a.samples = std::atoi(next());
    else if (s == "--user-dst")
      a.user_dst = true;
    else if (s == "--pin")
      a.pin = true;
    else if (s == "--csv")
      a.csv = true;
    else {
      std::fprintf(stderr,
                   "usage: put_bench [--transport NAME] [--min SIZE] [--max SIZE] [--window W] "
                   "[--count N] [--samples N] [--user-dst] [--pin] [--csv]\n");
      std::exit(2);
    }
  }
  if (a.min > a.max || a.window < 1 || a.samples < 1 || a.count < 0) {
    std::fprintf(stderr, "put_bench: need min <= max, window >= 1, samples >= 1, count >= 0\n");
    std::exit(2);
  }
  return a;
}

struct Sink : EventSink {
  uint64_t done = 0, arrived = 0, failed = 0;
  std::string error;
  void on_message(int, std::span<const uint8_t>) override {}
  void on_put_arrived(int, uint32_t) override { ++arrived; }
  void on_put_done(uint64_t, bool ok) override {
    ++done;
    if (!ok) ++failed;
  }
  void on_peer_error(int peer, const std::string& reason) override {
    if (error.empty()) error = "rank " + std::to_string(peer) + ": " + reason;
  }
};

bool write_blob(int fd, const void* p, uint32_t n) {
  return ::write(fd, &n, 4) == 4 && ::write(fd, p, n) == static_cast<ssize_t>(n);
}

std::vector<uint8_t> read_blob(int fd) {
  uint32_t n = 0;
  if (::read(fd, &n, 4) != 4 || n > (1u << 20)) return {};
  std::vector<uint8_t> b(n);
  for (size_t got = 0; got < n;) {
    ssize_t r = ::read(fd, b.data() + got, n - got);
    if (r <= 0) return {};
    got += static_cast<size_t>(r);
  }
  return b;
}

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) std::perror("put_bench: sched_setaffinity");
}

// The job id is the initiator's pid (the target is its child): both must name the same job.
TransportContext context(int rank, pid_t initiator) {
  TransportContext c;
  c.rank = rank;
  c.world_size = 2;
  c.job_id = "put-bench-" + std::to_string(initiator);
  c.store = std::make_shared<HashStore>();
  c.timeout = std::chrono::seconds(60);
  return c;
}

// The target: publishes its address and region, then progresses (busy, as ucx_perftest does)
// until the initiator closes the pipe.
[[noreturn]] void target(const Args& a, int rd, int wr) {
  ::alarm(600);
  if (a.pin) pin_to(1);
  try {
    auto t = create_transport(a.transport, context(1, ::getppid()));
    std::vector<uint8_t> user;
    std::unique_ptr<MemoryRegion> dst;
    if (a.user_dst) {
      user.assign(a.max, 0);
      dst = t->register_memory(user.data(), user.size(), Device::cpu());
    } else {
      dst = t->allocate_memory(a.max, Device::cpu());
      std::memset(dst->addr(), 0, a.max);
    }
    RemoteKey key = dst->remote_key();
    auto addr = t->address();
    write_blob(wr, addr.data(), static_cast<uint32_t>(addr.size()));
    write_blob(wr, &key, sizeof key);
    auto peer = read_blob(rd);
    if (peer.empty()) ::_exit(1);
    t->connect(0, peer, Clock::now() + std::chrono::seconds(60));
    Sink s;
    for (uint64_t i = 0; s.error.empty(); ++i) {
      t->progress(s);
      if (i % 1024 == 0) {
        pollfd pf{rd, POLLIN, 0};
        if (::poll(&pf, 1, 0) > 0) break;  // EOF: the initiator is done
      }
    }
    if (!s.error.empty()) {
      // The initiator leaving can break the connection before its pipe reads as closed here.
      pollfd pf{rd, POLLIN, 0};
      if (::poll(&pf, 1, 2000) > 0 && ::read(rd, &pf, 1) == 0) ::_exit(0);
      std::fprintf(stderr, "put_bench target: %s\n", s.error.c_str());
    }
    ::_exit(s.error.empty() ? 0 : 1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "put_bench target: %s\n", e.what());
    ::_exit(1);
  }
}

int run(const Args& a) {
  int down[2], up[2];
  if (::pipe(down) != 0 || ::pipe(up) != 0) {
    std::perror("put_bench: pipe");
    return 1;
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(down[1]);
    ::close(up[0]);
    target(a, down[0], up[1]);
  }
  ::close(down[0]);
  ::close(up[1]);
  ::alarm(600);
  int rc = 0;
  try {
    if (a.pin) pin_to(0);
    auto t = create_transport(a.transport, context(0, ::getpid()));
    auto src = t->allocate_memory(a.max, Device::cpu());
    std::memset(src->addr(), 0x5a, a.max);
    auto peer = read_blob(up[0]);
    auto kb = read_blob(up[0]);
    if (peer.empty() || kb.size() != sizeof(RemoteKey))
      throw Error("the target did not start (see its message above)");
    RemoteKey key;
    std::memcpy(&key, kb.data(), sizeof key);
    auto mine = t->address();
    write_blob(down[1], mine.data(), static_cast<uint32_t>(mine.size()));
    Endpoint& ep = t->connect(1, peer, Clock::now() + std::chrono::seconds(60));
    Sink s;
    auto check = [&] {
      if (!s.error.empty()) throw Error(s.error);
      if (s.failed) throw Error("a put failed");
    };
    // `n` puts of `bytes`, at most `window` in flight; seconds from first post to last done.
    auto stream = [&](size_t bytes, int n) {
      uint64_t base = s.done;
      int posted = 0;
      auto t0 = Clock::now();
      while (s.done - base < static_cast<uint64_t>(n)) {
        while (posted < n && posted - static_cast<int>(s.done - base) < a.window) {
          PostStatus st = ep.put(*src, 0, key, 0, bytes, static_cast<uint32_t>(posted), 0);
          if (st == PostStatus::PeerFailed) check();
          if (st != PostStatus::Ok) break;
          ++posted;
        }
        t->progress(s);
        check();
      }
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    if (!a.csv)
      std::printf("# put_bench: %s, %s target, window %d, %d samples (GB/s = 1e9 B/s)\n",
                  a.transport.c_str(), a.user_dst ? "registered user" : "allocated", a.window,
                  a.samples);
    if (a.csv)
      std::printf("transport,size,window,count,median_GBps,best_GBps,dst\n");
    else
      std::printf("%12s %6s %8s %12s %12s\n", "bytes", "count", "window", "median_GB/s",
                  "best_GB/s");
    for (size_t bytes = a.min; bytes <= a.max; bytes *= 2) {
      int n = a.count > 0 ? a.count
                          : static_cast<int>(std::clamp<size_t>((256u << 20) / bytes, 32, 1000));
      stream(bytes, a.window);  // warm-up: connection, rkey, mapping, page faults
      std::vector<double> gbps;
      for (int i = 0; i < a.samples; ++i)
        gbps.push_back(static_cast<double>(bytes) * n / stream(bytes, n) / 1e9);
      std::sort(gbps.begin(), gbps.end());
      double med = gbps.size() % 2 ? gbps[gbps.size() / 2]
                                   : (gbps[gbps.size() / 2 - 1] + gbps[gbps.size() / 2]) / 2;
      if (a.csv)
        std::printf("%s,%zu,%d,%d,%.3f,%.3f,%s\n", a.transport.c_str(), bytes, a.window, n, med,
                    gbps.back(), a.user_dst ? "user" : "allocated");
      else
        std::printf("%12zu %6d %8d %12.3f %12.3f\n", bytes, n, a.window, med, gbps.back());
      std::fflush(stdout);
      if (bytes > a.max / 2) break;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "put_bench: %s\n", e.what());
    rc = 1;
  }
  ::close(down[1]);  // the target leaves
  ::close(up[0]);
  int st = 0;
  for (int i = 0; i < 1000 && ::waitpid(pid, &st, WNOHANG) == 0; ++i) ::usleep(10000);
  if (::waitpid(pid, &st, WNOHANG) == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &st, 0);
    std::fprintf(stderr, "put_bench: the target did not leave within 10 s; killed\n");
    rc = 1;
  } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    rc = 1;
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) { return run(parse(argc, argv)); }
