// membw: the memory bandwidth bound of shm_direct's large all_gather. One or two processes,
// each bound to its own core, stream through buffers of their own at the same moment (a
// shared-memory barrier starts every repetition on both; the tests take turns, repetition by
// repetition): read-only and write-only loops, copies (the library's copy_out, memcpy, 64-byte
// streaming stores, the same four pages at a time), and local models of all_gather's copies
// without the peer and without waiting: "chunked" (the loop before defe7ea: a 2 MiB chunk
// into a staging buffer, then out of it), "fused" (allgather.cc's loop: chunk k + 1 in and
// chunk k out in one pass), and two variants of it that measured no better (four pages at a
// time; pieces of 16 or 64 KiB, in with rep movsb, out with streaming stores). Prints, per
// test, the bytes each process moved per second (best and median of the repetitions) and the
// sum over the processes.
//
// From it: a 2-rank all_gather of B bytes (m = B/2 per rank) must, per rank, read m and write
// m in place (its own block is already there), read m and write 2m out of place; with the
// nccl-tests busbw = algbw / 2 = m / time, the bound is busbw <= m / (time of that traffic
// with both ranks streaming). Run it at real-time priority on a busy machine (chrt -f 10).
//
//   g++ -O2 -std=c++20 -Isrc -Iinclude bench/membw.cpp -o /tmp/membw -L<build> -ltpcomm
//       -Wl,-rpath,<build> && /tmp/membw [--mib 128] [--reps 5] [--chunk-kib 2048] [--huge]
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "collectives/shm/algos.h"

namespace {

using tpcomm::coll::shm::copy_out;

double now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

void* map(size_t bytes, bool huge) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    std::exit(1);
  }
  madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  std::memset(p, 1, bytes);  // fault every page in before timing
  return p;
}

__attribute__((target("avx2"))) uint64_t read_all(const uint8_t* s, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a = _mm256_xor_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(s + i)));
    b = _mm256_xor_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(s + i + 32)));
    c = _mm256_xor_si256(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(s + i + 64)));
    d = _mm256_xor_si256(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(s + i + 96)));
  }
  a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
  return static_cast<uint64_t>(_mm256_extract_epi64(a, 0) ^ _mm256_extract_epi64(a, 2));
}

__attribute__((target("avx2"))) void write_nt(uint8_t* d, size_t n) {
  const __m256i z = _mm256_set1_epi8(3);
  for (size_t i = 0; i + 128 <= n; i += 128) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), z);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), z);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 64), z);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 96), z);
  }
  _mm_sfence();
}

struct Bufs {
  uint8_t* in;   // m bytes: this rank's input
  uint8_t* out;  // 2m bytes: the all_gather output
  uint8_t* stage;
  size_t m;
};

size_t kChunk = size_t{2} << 20;  // t.chunk_for() of a 128 MiB block; --chunk-kib

// Candidate copy routines beside copy_out (the library's).
__attribute__((target("avx512f"))) void nt512(void* dv, const void* sv, size_t n) {
  auto* d = static_cast<uint8_t*>(dv);
  const auto* s = static_cast<const uint8_t*>(sv);
  size_t i = 0;
  for (; i + 256 <= n; i += 256) {
    __m512i a = _mm512_loadu_si512(s + i), b = _mm512_loadu_si512(s + i + 64);
    __m512i c = _mm512_loadu_si512(s + i + 128), e = _mm512_loadu_si512(s + i + 192);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i), a);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + 64), b);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + 128), c);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + 192), e);
  }
  std::memcpy(d + i, s + i, n - i);
}

// Four 4 KiB pages at a time, a line of each in turn (glibc's large-copy idea: more DRAM
// pages open at once), streaming stores.
__attribute__((target("avx512f"))) void nt512_4page(void* dv, const void* sv, size_t n) {
  auto* d = static_cast<uint8_t*>(dv);
  const auto* s = static_cast<const uint8_t*>(sv);
  size_t i = 0;
  for (; i + 16384 <= n; i += 16384) {
    for (size_t l = 0; l < 4096; l += 64) {
      __m512i a = _mm512_loadu_si512(s + i + l), b = _mm512_loadu_si512(s + i + 4096 + l);
      __m512i c = _mm512_loadu_si512(s + i + 8192 + l), e = _mm512_loadu_si512(s + i + 12288 + l);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + l), a);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + 4096 + l), b);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + 8192 + l), c);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + 12288 + l), e);
    }
  }
  nt512(d + i, s + i, n - i);
}

// all_gather's fused step (allgather.cc): in -> stage (cached), in -> own (streaming, out of
// place), peer -> pout (streaming), in one pass.
template <bool kOwn>
__attribute__((target("avx512f"))) void fused(const uint8_t* in, uint8_t* stage, uint8_t* own,
                                              const uint8_t* peer, uint8_t* pout, size_t n) {
  for (size_t i = 0; i < n; i += 128) {
    const __m512i a = _mm512_loadu_si512(in + i), b = _mm512_loadu_si512(in + i + 64);
    const __m512i c = _mm512_loadu_si512(peer + i), d = _mm512_loadu_si512(peer + i + 64);
    _mm512_storeu_si512(stage + i, a);
    _mm512_storeu_si512(stage + i + 64, b);
    if constexpr (kOwn) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(own + i), a);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(own + i + 64), b);
    }
    _mm512_stream_si512(reinterpret_cast<__m512i*>(pout + i), c);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(pout + i + 64), d);
  }
}

// The same, four 4 KiB pages at a time (a line of each in turn).
template <bool kOwn>
__attribute__((target("avx512f"))) void fused4(const uint8_t* in, uint8_t* stage, uint8_t* own,
                                               const uint8_t* peer, uint8_t* pout, size_t n) {
  for (size_t i = 0; i < n; i += 16384) {
    for (size_t l = i; l < i + 4096; l += 64) {
      for (size_t p = l; p < l + 16384; p += 4096) {
        const __m512i a = _mm512_loadu_si512(in + p), c = _mm512_loadu_si512(peer + p);
        _mm512_storeu_si512(stage + p, a);
        if constexpr (kOwn) _mm512_stream_si512(reinterpret_cast<__m512i*>(own + p), a);
        _mm512_stream_si512(reinterpret_cast<__m512i*>(pout + p), c);
      }
    }
  }
}

void rep_movsb(void* d, const void* s, size_t n) {
  asm volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}

using CopyFn = void (*)(void*, const void*, size_t);
void copy_nt(void* d, const void* s, size_t n) { copy_out(d, s, n, true); }
void copy_mc(void* d, const void* s, size_t n) { std::memcpy(d, s, n); }

const char* const kNames[] = {"read only",
                              "write only, streaming",
                              "write only, memset",
                              "copy: copy_out (the library's)",
                              "copy: memcpy",
                              "copy: avx512 streaming",
                              "copy: avx512 streaming, 4 pages",
                              "ag model in place, chunked",
                              "ag model out of place, chunked",
                              "ag model in place, fused",
                              "ag model out of place, fused",
                              "ag model in place, fused 4 pages",
                              "ag model out of place, fused 4 pages",
                              "ag model in place, pieces of 16 KiB",
                              "ag model out of place, pieces of 16 KiB",
                              "ag model in place, pieces of 64 KiB",
                              "ag model out of place, pieces of 64 KiB"};
constexpr int kTests = sizeof(kNames) / sizeof(kNames[0]);

// One test on one process; returns the bytes it counts as moved (its "useful" bytes: for the
// all_gather models m, busbw's numerator, since busbw = algbw / 2 = m / time).
size_t run_test(int test, Bufs& b) {
  const size_t m = b.m;
  static volatile uint64_t sink;
  const CopyFn copies[] = {copy_nt, copy_mc, nt512, nt512_4page};
  switch (test) {
    case 0:
      sink = read_all(b.out, 2 * m);
      (void)sink;
      return 2 * m;
    case 1:
      write_nt(b.out, 2 * m);
      return 2 * m;
    case 2:
      std::memset(b.out, 5, 2 * m);
      return 2 * m;
    case 3:
    case 4:
    case 5:
    case 6:
      copies[test - 3](b.out, b.in, m);
      _mm_sfence();
      return m;
    case 7:
    case 8:
      // Today's loop without the peer: input -> staging, staging -> the peer's block (and the
      // own block out of place), one chunk after the other.
      for (size_t off = 0; off < m; off += kChunk) {
        const size_t c = std::min(kChunk, m - off);
        std::memcpy(b.stage, b.in + off, c);
        if (test == 8) copy_out(b.out + off, b.stage, c, true);
        copy_out(b.out + m + off, b.stage, c, true);
      }
      _mm_sfence();
      return m;
    default: {
      // The pipelined loop: chunk k + 1 in while chunk k (here: our own previous one, in the
      // other half of a double staging) goes out.
      for (size_t off = 0, k = 0; off < m; off += kChunk, ++k) {
        uint8_t* st = b.stage + (k & 1) * kChunk;
        const uint8_t* prev = b.stage + ((k + 1) & 1) * kChunk;
        if (test >= 13) {
          // Pieces: rep movsb in (whole lines without reading them for ownership), then the
          // peer's piece out with streaming stores (and the own piece, from the cache).
          const size_t piece = test >= 15 ? 65536 : 16384;
          for (size_t p = 0; p < kChunk; p += piece) {
            rep_movsb(st + p, b.in + off + p, piece);
            if (test % 2 == 0) nt512(b.out + off + p, st + p, piece);
            nt512(b.out + m + off + p, prev + p, piece);
          }
        } else if (test == 10) {
          fused<true>(b.in + off, st, b.out + off, prev, b.out + m + off, kChunk);
        } else if (test == 9) {
          fused<false>(b.in + off, st, nullptr, prev, b.out + m + off, kChunk);
        } else if (test == 12) {
          fused4<true>(b.in + off, st, b.out + off, prev, b.out + m + off, kChunk);
        } else {
          fused4<false>(b.in + off, st, nullptr, prev, b.out + m + off, kChunk);
        }
      }
      _mm_sfence();
      return m;
    }
  }
}

struct Shared {
  std::atomic<int> arrive[kTests * 12];  // one per repetition
  double secs[2][kTests][12];
};

void barrier(Shared* sh, int round, int nproc) {
  sh->arrive[round].fetch_add(1);
  while (sh->arrive[round].load() < nproc) _mm_pause();
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 128;
  int reps = 5;
  bool huge = false;
  int cpus[2] = {0, 1};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mib" && i + 1 < argc) {
      mib = std::strtoul(argv[++i], nullptr, 10);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::min(12, std::atoi(argv[++i])));
    } else if (a == "--chunk-kib" && i + 1 < argc) {
      kChunk = std::strtoul(argv[++i], nullptr, 10) << 10;
    } else if (a == "--huge") {
      huge = true;
    } else if (a == "--cpus" && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%d,%d", &cpus[0], &cpus[1]) != 2) return 2;
    } else {
      std::fprintf(stderr,
                   "usage: membw [--mib M] [--reps R] [--chunk-kib K] [--huge] [--cpus a,b]\n");
      return 2;
    }
  }
  const size_t m = mib << 20;
  auto* sh = static_cast<Shared*>(
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (sh == MAP_FAILED) return 1;
  std::printf("# membw: block m = %zu MiB per process (input m, output 2m), %s pages, %d reps\n",
              mib, huge ? "huge" : "4 KiB", reps);
  std::printf("# %-44s %6s %22s %22s\n", "test", "procs", "per proc best/med GB/s",
              "sum best/med GB/s");
  for (int nproc = 1; nproc <= 2; ++nproc) {
    for (auto& a : sh->arrive) a.store(0);
    std::vector<pid_t> kids;
    for (int p = 0; p < nproc; ++p) {
      pid_t pid = fork();
      if (pid == 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpus[p], &set);
        sched_setaffinity(0, sizeof(set), &set);
        Bufs b{static_cast<uint8_t*>(map(m, huge)), static_cast<uint8_t*>(map(2 * m, huge)),
               static_cast<uint8_t*>(map(2 * kChunk, huge)), m};
        int round = 0;
        for (int t = 0; t < kTests; ++t) run_test(t, b);  // warm-up
        for (int r = 0; r < reps; ++r) {
          for (int t = 0; t < kTests; ++t) {
            barrier(sh, round++, nproc);
            const double t0 = now();
            const size_t bytes = run_test(t, b);
            sh->secs[p][t][r] = (now() - t0) / static_cast<double>(bytes);
          }
        }
        _exit(0);
      }
      kids.push_back(pid);
    }
    for (pid_t k : kids) waitpid(k, nullptr, 0);
    for (int t = 0; t < kTests; ++t) {
      std::vector<double> per, sum;  // GB/s of each repetition
      for (int r = 0; r < reps; ++r) {
        double s = 0;
        for (int p = 0; p < nproc; ++p) {
          const double g = 1e-9 / sh->secs[p][t][r];
          per.push_back(g);
          s += g;
        }
        sum.push_back(s);
      }
      std::sort(per.begin(), per.end());
      std::sort(sum.begin(), sum.end());
      std::printf("  %-44s %6d %10.2f / %-9.2f %10.2f / %-9.2f\n", kNames[t], nproc, per.back(),
                  per[per.size() / 2], sum.back(), sum[sum.size() / 2]);
    }
  }
  return 0;
}
