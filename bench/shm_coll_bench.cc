// shm_coll_bench: times HostColl (shm_direct) on forked ranks of this host with the
// peers' measurement protocol (their bench_common.h): per size, warm-up ops, then
// samples of (barrier + a batch of ops), a sample's time is the max over ranks, the median
// sample is reported; float32; BYTES is the whole result buffer (nccl-tests), busbw by the
// nccl-tests formulas. Output lines match the peers' so that collate.py can join them:
//
//   tpcomm-shm allreduce 268435456 41234.5 6.51 6.51
//
// Usage: shm_coll_bench [--ranks 2] [--ops allreduce,broadcast,allgather,barrier]
//                       [--sizes 8,128K,256M] [--quick] [--no-pin]
// TPCOMM_SHM_COLL_BYTES / _CHUNK / _SPIN_US in the environment tune the algorithm.
#include <dirent.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "collectives/shm/host_coll.h"
#include "core/config.h"
#include "tpcomm/store.hpp"

using namespace tpcomm;
using namespace tpcomm::coll;

namespace {

struct Opts {
  int ranks = 2;
  std::vector<std::string> ops = {"allreduce", "broadcast", "allgather"};
  std::vector<size_t> sizes = {8,      32,     128,     512,     2048,     8192,      32768,
                               131072, 524288, 2097152, 8388608, 33554432, 134217728, 268435456};
  bool quick = false;
  bool pin = true;
};

struct Schedule {
  int warmup, samples, batch;
};

Schedule schedule_for(size_t bytes, bool quick) {
  Schedule s{1, 3, 1};
  if (bytes <= (64u << 10))
    s = {10, 15, 20};
  else if (bytes <= (2u << 20))
    s = {5, 11, 5};
  else if (bytes <= (32u << 20))
    s = {2, 9, 1};
  else if (bytes <= (256u << 20))
    s = {1, 5, 1};
  if (quick) s = {std::min(s.warmup, 2), 3, std::min(s.batch, 2)};
  return s;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p <= s.size()) {
    size_t c = s.find(',', p);
    if (c == std::string::npos) c = s.size();
    if (c > p) out.push_back(s.substr(p, c - p));
    p = c + 1;
  }
  return out;
}

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void fail(int rank, const std::string& what) {
  std::fprintf(stderr, "VERIFY FAILED rank %d: %s\n", rank, what.c_str());
  std::fflush(stderr);
  _exit(10);
}

// One rank's whole sweep.
int run_rank(const Opts& o, int rank, const std::string& dir) {
  if (o.pin) {
    cpu_set_t set;
    CPU_ZERO(&set);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    CPU_SET(static_cast<int>(rank % std::max(1L, ncpu)), &set);
    sched_setaffinity(0, sizeof set, &set);
  }
  FileStore store(dir + "/store", o.ranks);
  const Deadline dl = Deadline::after(std::chrono::minutes(5));
  auto hc = shm::HostColl::create(store, rank, o.ranks, dl);
  const int n = o.ranks;
  auto barrier = [&] { hc->barrier(dl); };
  auto max_over_ranks = [&](double v) {
    AllReduceArgs a;
    a.input = a.output = Tensor::raw(&v, 1, DType::Float64);
    a.op = ReduceOp::MAX;
    hc->all_reduce(a, dl);
    return v;
  };
  for (const std::string& op : o.ops) {
    for (size_t bytes : o.sizes) {
      const size_t count = std::max<size_t>(1, bytes / 4);
      size_t count_in = count, count_out = count;
      if (op == "allgather") {
        count_in = std::max<size_t>(1, count / static_cast<size_t>(n));
        count_out = count_in * static_cast<size_t>(n);
      }
      std::vector<float> in(count_in), out(count_out);
      for (size_t i = 0; i < count_in; ++i) in[i] = static_cast<float>((rank + 1) * ((i % 7) + 1));
      std::function<void()> fn;
      std::function<void()> verify;
      if (op == "allreduce") {
        AllReduceArgs a;
        a.input = Tensor::of(in);
        a.output = Tensor::of(out);
        fn = [&hc, a, dl] { hc->all_reduce(a, dl); };
        verify = [&, n] {
          const float tri = static_cast<float>(n * (n + 1) / 2);
          for (size_t i = 0; i < count; i += 1 + count / 4096) {
            if (out[i] != tri * static_cast<float>((i % 7) + 1)) fail(rank, "allreduce");
          }
        };
      } else if (op == "broadcast") {
        BroadcastArgs a;
        a.tensor = Tensor::of(out);
        a.root = 0;
        fn = [&hc, a, dl] { hc->broadcast(a, dl); };
        if (rank == 0) out = in;
        verify = [&] {
          for (size_t i = 0; i < count; i += 1 + count / 4096) {
            if (out[i] != static_cast<float>((i % 7) + 1)) fail(rank, "broadcast");
          }
        };
      } else if (op == "allgather") {
        AllGatherArgs a;
        a.input = Tensor::of(in);
        a.output = Tensor::of(out);
        fn = [&hc, a, dl] { hc->all_gather(a, dl); };
        verify = [&] {
          for (int q = 0; q < n; ++q) {
            for (size_t i = 0; i < count_in; i += 1 + count_in / 1024) {
              if (out[q * count_in + i] != static_cast<float>((q + 1) * ((i % 7) + 1))) {
                fail(rank, "allgather");
              }
            }
          }
        };
      } else if (op == "barrier") {
        fn = [&hc, dl] { hc->barrier(dl); };
        verify = [] {};
      } else {
        std::fprintf(stderr, "unknown op %s\n", op.c_str());
        return 2;
      }
      const size_t real_bytes = count_out * 4;
      Schedule s = schedule_for(real_bytes, o.quick);
      for (int i = 0; i < s.warmup; ++i) {
        fn();
        if (i == 0) verify();
      }
      std::vector<double> samples;
      for (int k = 0; k < s.samples; ++k) {
        barrier();
        double t0 = now_us();
        for (int b = 0; b < s.batch; ++b) fn();
        double t = (now_us() - t0) / s.batch;
        samples.push_back(max_over_ranks(t));
      }
      verify();
      std::sort(samples.begin(), samples.end());
      const double us = samples[samples.size() / 2];
      const double algbw = static_cast<double>(real_bytes) / us / 1e3;
      double factor = 1;
      if (op == "allreduce") factor = 2.0 * (n - 1) / n;
      if (op == "allgather") factor = static_cast<double>(n - 1) / n;
      if (rank == 0) {
        std::printf("tpcomm-shm %s %zu %.3f %.4f %.4f\n", op.c_str(), real_bytes, us, algbw,
                    algbw * factor);
        std::fflush(stdout);
      }
    }
  }
  barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--ranks") {
      o.ranks = std::atoi(next().c_str());
    } else if (a == "--ops") {
      o.ops = split(next());
    } else if (a == "--sizes") {
      o.sizes.clear();
      for (const std::string& t : split(next())) {
        auto v = config::parse_size(t);
        if (!v) {
          std::fprintf(stderr, "bad size %s\n", t.c_str());
          return 2;
        }
        o.sizes.push_back(*v);
      }
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--no-pin") {
      o.pin = false;
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--ranks N] [--ops allreduce,broadcast,allgather] [--sizes 8,128K,256M] "
          "[--quick] [--no-pin]\n",
          argv[0]);
      return 2;
    }
  }
  char tmpl[] = "/tmp/shm-coll-bench-XXXXXX";
  if (!mkdtemp(tmpl)) return 1;
  const std::string dir = tmpl;
  std::printf("# tpcomm-shm: HostColl shm_direct, %d ranks, float32\n", o.ranks);
  std::fflush(stdout);
  std::vector<pid_t> pids;
  for (int r = 0; r < o.ranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = 1;
      try {
        rc = run_rank(o, r, dir);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(nullptr);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  int worst = 0;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    worst = std::max(worst, rc);
  }
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") unlink((dir + "/" + name).c_str());
    }
    closedir(d);
  }
  rmdir(dir.c_str());
  return worst;
}
