// Point-to-point latency and bandwidth between two forked ranks, over each transport,
// through the public API (ProcessGroup send/recv/isend/irecv): the numbers a user sees.
//
//   bin/p2p_bench                          # tcp and shm, 8 B .. 256 MiB
//   bin/p2p_bench --transport tcp --max 1M
//   bin/p2p_bench --csv                    # machine-readable
//
// lat_us: one-way latency = half the median round trip of a blocking ping-pong (7 samples
// after warm-up samples; --samples prints the 7).
// bw_GBps: unidirectional bandwidth: rank 0 isends a window of messages, rank 1 irecvs them
// and answers with 8 bytes; bytes / time, median of several samples (1 GB = 1e9 B).
// memcpy_GBps: single-thread memcpy of the same size on this machine, for reference.
// --thp: every buffer (the memcpy reference's too) on transparent huge pages.
// --lat-only S: latency only, S samples of 200 round trips each; prints the best, the first
// quartile and the median sample (one-way us): on a loaded machine the best is the path's cost.
// --stream W: bandwidth only, measured like ucx_perftest's tag_bw (a sliding window of W
// sends in flight, the receiver keeping W receives posted; a new one is posted as soon as the
// oldest completes), so that the two compare like with like (bench/ucx_compare.sh).
// --untouched-src: the send buffer is never written, so its reads map the kernel's shared zero
// page (one physical page, always in the cache), as ucx_perftest's send buffers are over UCX's
// tcp (ucp_mem_map ALLOCATE by mmap, never written by tag_bw): the sender's copy into the
// socket then takes ~40% less CPU. For comparisons only.
// --bw-only: bandwidth only (the default mode's window, without the ping-pong; lat_us is 0).
// --alias-recv: --stream's W receive buffers are W views of one memory file: distinct
// addresses (tpcomm refuses overlapping pending receives) over the same physical pages, so the
// receive memory's cache footprint is one buffer, as in ucx_perftest's tag_bw, which posts all
// W receives into one buffer. On 4 KiB pages (shared memory gets no THP here). Comparisons only.
// --msg-pct P: --stream also prints the P-th percentile and the median of the per-message time
// (us, rank 0, between consecutive completions), comparable with ucx_perftest's -R column.
#include <sched.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_buffer.h"
#include "core/config.h"
#include "tpcomm/tpcomm.hpp"
#include "tpcomm/transport/transport.hpp"

namespace {

using namespace tpcomm;
using bench::BenchBuffer;
using Clock = std::chrono::steady_clock;

struct Args {
  std::vector<std::string> transports;
  size_t min = 8, max = 256 << 20;
  bool csv = false;
  bool pin = false;      // rank r on CPU r (less migration noise on a shared machine)
  double seconds = 0.2;  // target time per measurement
  int stream = 0;        // > 0: bandwidth only, sliding window of this many messages
  bool thp = false;      // buffers on transparent huge pages (as large-tensor allocators do)
  int lat_only = 0;      // > 0: latency only, in this many short samples (min and median)
  bool split = false;    // --lat-only: also time rank 1's send() call (TSC ticks)
  bool samples = false;  // --samples: print every latency sample (one-way us), not only the median
  bool untouched_src = false;  // --untouched-src: the send buffer is never written (zero page)
  double msg_pct = 0;          // --msg-pct P: --stream also prints the P-th percentile message time
  bool bw_only = false;        // --bw-only: skip the ping-pong (lat_us prints 0)
  bool alias_recv = false;     // --alias-recv: --stream's receive buffers share physical pages
};

// A buffer of `bytes` filled with `fill`, on huge pages with `thp` (tpbench's buffers: the
// memcpy reference uses the same kind as the transfers).
std::unique_ptr<BenchBuffer> buffer(size_t bytes, uint8_t fill, bool thp) {
  auto b = std::make_unique<BenchBuffer>(bytes, thp);
  std::memset(b->data(), fill, bytes);
  return b;
}

// A cheap timestamp for short intervals: TSC ticks on x86, else nanoseconds.
uint64_t ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(Clock::now().time_since_epoch().count());
#endif
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string human(size_t b) {
  char buf[32];
  if (b >= (1u << 20) && b % (1u << 20) == 0)
    std::snprintf(buf, sizeof buf, "%zu MiB", b >> 20);
  else if (b >= 1024 && b % 1024 == 0)
    std::snprintf(buf, sizeof buf, "%zu KiB", b >> 10);
  else
    std::snprintf(buf, sizeof buf, "%zu B", b);
  return buf;
}

double memcpy_gbps(size_t bytes, bool thp) {
  auto a = buffer(bytes, 1, thp), b = buffer(bytes, 2, thp);
  int reps = static_cast<int>(std::max<size_t>(3, (256u << 20) / std::max<size_t>(bytes, 1)));
  reps = std::min(reps, 100000);
  std::vector<double> t;
  for (int s = 0; s < 5; ++s) {
    auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) {
      std::memcpy(b->data(), a->data(), bytes);
      asm volatile("" : : "r"(b->data()) : "memory");
    }
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / reps);
  }
  return bytes / median(t) / 1e9;
}

// --stream: `count` messages through a sliding window of `window` (like ucx_perftest's
// tag_bw); both sides wait for their oldest operation before posting the next. Returns GB/s
// on rank 0 (after the receiver's ack), 0 on rank 1. With `gaps`, rank 0 appends the time
// between consecutive completions (us): at window 1, each message's time.
double stream_bw(ProcessGroup& pg, int rank, size_t bytes, int window, int count,
                 const BenchBuffer& sbuf, const std::vector<std::unique_ptr<BenchBuffer>>& rbufs,
                 std::vector<double>* gaps = nullptr) {
  int peer = 1 - rank;
  int64_t ack = 0;
  pg.send(Tensor::of(&ack, 1), peer, 1);  // both sides: line up
  pg.recv(Tensor::of(&ack, 1), peer, 1);
  std::vector<std::shared_ptr<Work>> works(static_cast<size_t>(window));
  auto t0 = Clock::now();
  auto last = t0;
  for (int i = 0; i < count; ++i) {
    auto& w = works[static_cast<size_t>(i % window)];
    if (w) {
      w->wait();
      if (gaps != nullptr) {
        auto now = Clock::now();
        gaps->push_back(std::chrono::duration<double, std::micro>(now - last).count());
        last = now;
      }
    }
    w = rank == 0
            ? pg.isend(Tensor::raw(sbuf.data(), static_cast<int64_t>(bytes), DType::UInt8), peer, 2)
            : pg.irecv(Tensor::raw(rbufs[static_cast<size_t>(i % window)]->data(),
                                   static_cast<int64_t>(bytes), DType::UInt8),
                       peer, 2);
  }
  for (auto& w : works)
    if (w) w->wait();
  if (rank == 0)
    pg.recv(Tensor::of(&ack, 1), peer, 3);
  else
    pg.send(Tensor::of(&ack, 1), peer, 3);
  double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  return rank == 0 ? static_cast<double>(bytes) * count / sec / 1e9 : 0.0;
}

// One rank of the benchmark. Rank 0 prints.
void run_rank(int rank, const std::string& dir, const std::string& transport, const Args& a) {
  auto store = std::make_shared<FileStore>(dir + "/store-" + transport, -1);
  InitOptions o;
  o.backend = transport;
  auto pg = ProcessGroup::create(store, rank, 2, o);
  int peer = 1 - rank;
  auto buf =
      a.untouched_src ? std::make_unique<BenchBuffer>(a.max, a.thp) : buffer(a.max, 1, a.thp);
  auto buf2 = buffer(a.max, 2, a.thp);
  int64_t ack = 0;
  std::vector<std::unique_ptr<BenchBuffer>> rbufs;
  if (rank == 0 && !a.csv) {
    std::printf("\n%s transport (2 ranks, tpcomm ProcessGroup send/recv)\n", transport.c_str());
    std::printf("%12s %12s %12s %12s\n", "size", "lat_us", "bw_GBps", "memcpy_GBps");
  }
  if (a.stream > 0) {
    if (rank == 1 && a.alias_recv) rbufs = BenchBuffer::views_of_one(a.max, a.stream);
    while (rank == 1 && static_cast<int>(rbufs.size()) < a.stream)
      rbufs.push_back(buffer(a.max, 0, a.thp));
    for (size_t bytes = a.min; bytes <= a.max; bytes *= 2) {
      // About 0.25 s of data at 4 GB/s per sample, at least 2 windows; median of 5 samples.
      int count = static_cast<int>(std::max<size_t>(2 * a.stream, (1ull << 30) / bytes));
      stream_bw(*pg, rank, bytes, a.stream, a.stream, *buf, rbufs);  // warm-up
      std::vector<double> bw, gaps;
      for (int s = 0; s < 5; ++s)
        bw.push_back(stream_bw(*pg, rank, bytes, a.stream, count, *buf, rbufs,
                               a.msg_pct > 0 ? &gaps : nullptr));
      if (rank == 0 && !gaps.empty()) {
        // Per-message times are robust to a loaded machine at low percentiles: the messages
        // that no other process interrupted (ucx_perftest's -R column is the same measure).
        std::sort(gaps.begin(), gaps.end());
        size_t k = std::min(gaps.size() - 1, static_cast<size_t>(a.msg_pct / 100 * gaps.size()));
        std::printf("%s,%zu,msg_p%g_us,%.2f,msg_p50_us,%.2f\n", transport.c_str(), bytes, a.msg_pct,
                    gaps[k], gaps[gaps.size() / 2]);
      }
      if (rank == 0) {
        if (a.csv)
          std::printf("%s,%zu,,%.3f,\n", transport.c_str(), bytes, median(bw));
        else
          std::printf("%12s %12s %12.3f\n", human(bytes).c_str(), "-", median(bw));
        std::fflush(stdout);
      }
    }
    pg->destroy();
    return;
  }
  if (a.lat_only > 0) {
    // Many short samples, so that a loaded machine's preemptions spoil only some: the best
    // sample is the path's cost, the median what a busy machine gives.
    for (size_t bytes = a.min; bytes <= a.max; bytes *= 2) {
      Tensor t = Tensor::raw(buf->data(), static_cast<int64_t>(bytes), DType::UInt8);
      Tensor t2 = Tensor::raw(buf2->data(), static_cast<int64_t>(bytes), DType::UInt8);
      int iters = bytes <= 65536 ? 200 : 10;
      std::vector<double> rtt;
      // --split: rank 1 from recv()'s return to send()'s (the receive's Work dropped, the send's
      // Work, link, header, ring write, Work release) in ticks, every 8th round trip: the part
      // of the path this process spends after an arrival.
      std::vector<uint64_t> send_ticks;
      for (int s = -3; s < a.lat_only; ++s) {  // 3 warm-up samples
        auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i) {
          if (rank == 0) {
            pg->send(t, peer);
            pg->recv(t2, peer);
          } else if (a.split && s >= 0 && (i & 7) == 0) {
            uint64_t c0;
            {
              auto w = pg->recv(t2, peer);
              c0 = ticks();  // the receive's Work is dropped after this, as in the plain loop
            }
            pg->send(t, peer);
            send_ticks.push_back(ticks() - c0);
          } else {
            pg->recv(t2, peer);
            pg->send(t, peer);
          }
        }
        double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (s >= 0) rtt.push_back(us / iters / 2);
      }
      std::sort(rtt.begin(), rtt.end());
      if (rank == 1 && a.split && !send_ticks.empty()) {
        std::sort(send_ticks.begin(), send_ticks.end());
        std::printf("rank 1 recv() return to send() return, ticks: min %llu p25 %llu median %llu\n",
                    static_cast<unsigned long long>(send_ticks.front()),
                    static_cast<unsigned long long>(send_ticks[send_ticks.size() / 4]),
                    static_cast<unsigned long long>(send_ticks[send_ticks.size() / 2]));
        std::fflush(stdout);
      }
      if (rank == 0) {
        std::printf("%s,%zu,lat_min_us,%.3f,lat_p25_us,%.3f,lat_med_us,%.3f\n", transport.c_str(),
                    bytes, rtt.front(), rtt[rtt.size() / 4], rtt[rtt.size() / 2]);
        std::fflush(stdout);
      }
    }
    pg->destroy();
    return;
  }
  for (size_t bytes = a.min; bytes <= a.max; bytes *= 2) {
    Tensor t = Tensor::raw(buf->data(), static_cast<int64_t>(bytes), DType::UInt8);
    Tensor t2 = Tensor::raw(buf2->data(), static_cast<int64_t>(bytes), DType::UInt8);
    // Latency: ping-pong, after warm-up samples (the first exchanges make the connection, and
    // the first milliseconds of a ping-pong run measurably slower: caches, the other rank
    // still starting, the CPUs' clocks; ucx_perftest and the OSU benchmarks skip theirs too),
    // then the median of 7 samples.
    int iters = bytes <= 65536 ? 2000 : bytes <= (4u << 20) ? 100 : 5;
    int warm = bytes <= 65536 ? 5 : 1;
    std::vector<double> rtt;
    for (int s = a.bw_only ? 7 : -warm; s < 7; ++s) {
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) {
        if (rank == 0) {
          pg->send(t, peer);
          pg->recv(t2, peer);
        } else {
          pg->recv(t2, peer);
          pg->send(t, peer);
        }
      }
      if (s >= 0)
        rtt.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters);
    }
    double lat = rtt.empty() ? 0.0 : median(rtt) / 2;
    if (rank == 0 && a.samples) {
      std::printf("%s latency samples (one-way us):", human(bytes).c_str());
      for (double v : rtt) std::printf(" %.3f", v / 2);
      std::printf("\n");
    }
    // Bandwidth: a window of messages one way, then an ack.
    int window = bytes <= 65536 ? 64 : bytes <= (4u << 20) ? 16 : bytes <= (32u << 20) ? 4 : 2;
    // Receives in flight together need their own buffers.
    while (rank == 1 && static_cast<int>(rbufs.size()) < window)
      rbufs.push_back(buffer(a.max, 0, a.thp));
    int rounds = bytes <= (1u << 20) ? 20 : bytes <= (32u << 20) ? 4 : 2;
    std::vector<double> bw;
    std::vector<std::shared_ptr<Work>> works(window);
    for (int s = 0; s < 5; ++s) {
      pg->send(Tensor::of(&ack, 1), peer, 1);  // both sides: line up
      pg->recv(Tensor::of(&ack, 1), peer, 1);
      auto t0 = Clock::now();
      for (int r = 0; r < rounds; ++r) {
        for (int i = 0; i < window; ++i)
          works[i] = rank == 0 ? pg->isend(t, peer, 2)
                               : pg->irecv(Tensor::raw(rbufs[i]->data(),
                                                       static_cast<int64_t>(bytes), DType::UInt8),
                                           peer, 2);
        for (auto& w : works) w->wait();
      }
      if (rank == 0)
        pg->recv(Tensor::of(&ack, 1), peer, 3);
      else
        pg->send(Tensor::of(&ack, 1), peer, 3);
      double sec = std::chrono::duration<double>(Clock::now() - t0).count();
      bw.push_back(static_cast<double>(bytes) * window * rounds / sec / 1e9);
    }
    if (rank == 0) {
      double mc = memcpy_gbps(bytes, a.thp);
      if (a.csv)
        std::printf("%s,%zu,%.3f,%.3f,%.3f\n", transport.c_str(), bytes, lat, median(bw), mc);
      else
        std::printf("%12s %12.2f %12.3f %12.3f\n", human(bytes).c_str(), lat, median(bw), mc);
      std::fflush(stdout);
    }
  }
  pg->destroy();
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (s == "--transport") {
      a.transports.push_back(next());
    } else if (s == "--min") {
      a.min = config::parse_size(next()).value_or(8);
    } else if (s == "--max") {
      a.max = config::parse_size(next()).value_or(256 << 20);
    } else if (s == "--csv") {
      a.csv = true;
    } else if (s == "--pin") {
      a.pin = true;
    } else if (s == "--thp") {
      a.thp = true;
    } else if (s == "--stream") {
      a.stream = std::max(1, std::atoi(next().c_str()));
    } else if (s == "--samples") {
      a.samples = true;
    } else if (s == "--msg-pct") {
      a.msg_pct = std::atof(next().c_str());
    } else if (s == "--untouched-src") {
      a.untouched_src = true;
    } else if (s == "--alias-recv") {
      a.alias_recv = true;
    } else if (s == "--bw-only") {
      a.bw_only = true;
    } else if (s == "--split") {
      a.split = true;
    } else if (s == "--lat-only") {
      a.lat_only = std::max(1, std::atoi(next().c_str()));
    } else {
      std::fprintf(stderr,
                   "usage: %s [--transport tcp|shm]... [--min 8] [--max 256M] [--csv] [--pin] "
                   "[--stream WINDOW] [--thp] [--lat-only SAMPLES] [--samples] [--split] "
                   "[--untouched-src] [--msg-pct P] [--bw-only] [--alias-recv]\n",
                   argv[0]);
      return 2;
    }
  }
  if (a.transports.empty())
    for (const char* t : {"shm", "tcp"})
      if (transport::has_transport(t)) a.transports.push_back(t);
  char tmpl[] = "/tmp/tpcomm-p2p-bench-XXXXXX";
  std::string dir = mkdtemp(tmpl) ? tmpl : "/tmp";
  if (a.csv) std::printf("transport,bytes,lat_us,bw_GBps,memcpy_GBps\n");
  int rc = 0;
  for (const std::string& tr : a.transports) {
    std::fflush(stdout);
    pid_t pids[2];
    for (int r = 0; r < 2; ++r) {
      pids[r] = fork();
      if (pids[r] == 0) {
        if (a.pin) {
          cpu_set_t set;
          CPU_ZERO(&set);
          CPU_SET(r % static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)), &set);
          sched_setaffinity(0, sizeof set, &set);
        }
        try {
          run_rank(r, dir, tr, a);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "rank %d (%s): %s\n", r, tr.c_str(), e.what());
          _exit(1);
        }
        std::fflush(stdout);
        _exit(0);
      }
    }
    for (pid_t p : pids) {
      int st = 0;
      waitpid(p, &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
    }
    unlink((dir + "/store-" + tr).c_str());
  }
  rmdir(dir.c_str());
  return rc;
}
