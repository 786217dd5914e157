// exchange_floor: what one exchange of 8 bytes between two processes costs on this machine,
// the floor of a 2-rank small all_reduce on shared memory. Two pinned processes each publish
// a value and a step number and wait for the other's, 500 times per batch, 300 batches:
//   mode 0: one cache line per process (each writes its own, reads the other's),
//   mode 1: both processes' 32-byte slots in one shared line (shm_direct's SharedSlot),
//   mode 2: ping-pong (process 0 posts, process 1 adds and answers): two one-way trips,
//   mode 3: mode 2 with each written line demoted to the shared cache (CLDEMOTE, as the shm
//           ring does after publishing a record): the reader finds it in the LLC,
//   mode 4: mode 1 with the shared line demoted once written (CLDEMOTE),
//   mode 5: mode 1 with a release store instead of a sequentially consistent one (no fence;
//           shm_direct's post needs the fence for its sleepers' count),
//   mode 6: mode 0 (value and step in one line per process, two alternating slots, no
//           acknowledgement) with the slot this process writes next taken back in exclusive
//           state (PREFETCHW) as soon as the peer's step is seen: the peer has then finished
//           reading it, so the next post writes a line this core already owns,
//   mode 7: mode 1 with the next parity's shared line taken exclusive (PREFETCHW) once the
//           peer's step is seen,
//   mode 8: mode 0 with a 16-byte step+value slot written and read as one 16-byte access
//           (atomic on AVX CPUs) in a single slot per process: no alternation,
//   mode 9: mode 5 as a symmetric exchange, mode 10: mode 4 as a symmetric exchange (modes 4
//           and 5 run like modes 2 and 3: process 1 waits for process 0's step, then answers;
//           they measure a ping-pong through the shared line, not mode 1's exchange).
// Prints min / p25 / median per exchange.
//
//   g++ -O2 -std=c++20 -o /tmp/exchange_floor bench/exchange_floor.cpp && /tmp/exchange_floor
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

struct alignas(32) Slot {
  std::atomic<uint64_t> seq;
  float val[2];
  uint64_t pad[2];
};

// CLDEMOTE of the line at `p` (a no-op on CPUs without it).
void demote(const void* p) {
#if defined(__x86_64__)
  asm volatile("cldemote %0" : : "m"(*static_cast<const char*>(p)) : "memory");
#else
  (void)p;
#endif
}

// PREFETCHW: the line at `p` in exclusive state, ready to be written.
void prefetchw(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

// Slot `who` of parity `p` in the layout of `mode`.
Slot* slot(char* mem, int mode, int who, int p) {
  if (mode == 8) return reinterpret_cast<Slot*>(mem + who * 128);
  if (mode == 6) return reinterpret_cast<Slot*>(mem + (who * 2 + p) * 128);
  if (mode == 1 || mode >= 4) return reinterpret_cast<Slot*>(mem + p * 128) + who;
  return reinterpret_cast<Slot*>(mem + (who * 2 + p) * 128);
}

double run(int mode) {
  char* mem = static_cast<char*>(
      mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (mem == MAP_FAILED) return -1;
  std::memset(mem, 0, 8192);
  pid_t pid = fork();
  const int me = pid == 0 ? 1 : 0;
  cpu_set_t cs;
  CPU_ZERO(&cs);
  CPU_SET(me, &cs);
  sched_setaffinity(0, sizeof cs, &cs);
  std::vector<double> v;
  uint64_t k = 0;
  float out[2] = {0, 0};
  for (int b = 0; b < 300; ++b) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 500; ++i) {
      ++k;
      const int p = static_cast<int>(k & 1);
      Slot* mine = slot(mem, mode, me, p);
      Slot* theirs = slot(mem, mode, 1 - me, p);
      if (mode >= 2 && mode <= 5 && me == 1) {  // modes 2-5: process 1 answers
        while (theirs->seq.load(std::memory_order_acquire) < k) {
        }
        mine->val[0] = theirs->val[0] + 1;
        mine->val[1] = theirs->val[1] + 2;
        mine->seq.store(k, std::memory_order_release);
        if (mode == 3) demote(mine);
        continue;
      }
      if (mode == 8) {
        // Step in the low 8 bytes, the two floats in the high 8: one 16-byte store and load.
        float v2[2] = {1, 2};
        uint64_t bits;
        std::memcpy(&bits, v2, 8);
        __m128i w = _mm_set_epi64x(static_cast<long long>(bits), static_cast<long long>(k));
        _mm_store_si128(reinterpret_cast<__m128i*>(mine), w);
        __m128i got;
        do {
          got = _mm_load_si128(reinterpret_cast<const __m128i*>(theirs));
          asm volatile("" ::: "memory");
        } while (static_cast<uint64_t>(_mm_cvtsi128_si64(got)) < k);
        uint64_t hb = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(got, got)));
        float tv[2];
        std::memcpy(tv, &hb, 8);
        out[0] = tv[0] + 1;
        out[1] = tv[1] + 2;
        asm volatile("" : : "r"(out) : "memory");
        continue;
      }
      mine->val[0] = 1;
      mine->val[1] = 2;
      if (mode == 5 || mode == 9) {
        mine->seq.store(k, std::memory_order_release);
      } else {
        mine->seq.store(k, std::memory_order_seq_cst);
      }
      if (mode == 3 || mode == 4 || mode == 10) demote(mine);
      while (theirs->seq.load(std::memory_order_acquire) < k) {
      }
      if (mode == 6 || mode == 7) prefetchw(slot(mem, mode, me, p ^ 1));
      const bool sum = mode < 2 || mode >= 6;  // the symmetric exchanges
      out[0] = theirs->val[0] + (sum ? mine->val[0] : 0);
      out[1] = theirs->val[1] + (sum ? mine->val[1] : 0);
      asm volatile("" : : "r"(out) : "memory");
    }
    v.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        500);
  }
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  munmap(mem, 8192);
  std::sort(v.begin(), v.end());
  std::printf("mode %d (%s): min %.3f p25 %.3f median %.3f us\n", mode,
              mode == 0   ? "a line per process"
              : mode == 1 ? "one shared line"
              : mode == 2 ? "ping-pong"
              : mode == 3 ? "ping-pong, demoted"
              : mode == 4 ? "one shared line, demoted"
              : mode == 5 ? "one shared line, release store"
              : mode == 6 ? "a line per process, next slot PREFETCHW"
              : mode == 7 ? "one shared line, next line PREFETCHW"
              : mode == 8 ? "a line per process, one 16-byte slot"
              : mode == 9 ? "one shared line, release store, both post"
                          : "one shared line, demoted, both post",
              v[0], v[v.size() / 4], v[v.size() / 2]);
  return v[0];
}

}  // namespace

int main(int argc, char** argv) {
  // Optional arguments: the modes to run (default all), e.g. `exchange_floor 1 4`.
  if (argc > 1) {
    for (int i = 1; i < argc; ++i) run(std::atoi(argv[i]));
    return 0;
  }
  for (int mode = 0; mode < 11; ++mode) run(mode);
  return 0;
}
