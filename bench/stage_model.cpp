// stage_model: the staged copy of the shm_direct collectives and of the shm transport's
// staged puts, without tpcomm, with each kind of staging stores (core/stage_policy.h). Two
// pinned processes: the writer (CPU 0) copies 128 MiB, chunk by chunk, into a ring of 3 x 2 MiB
// slots in shared memory with cached stores ("cached") or streaming stores ("nt"); the reader
// (CPU 1) copies each slot out with streaming stores. Rounds alternate the two kinds; each line
// prints both: the transfer's GB/s and the GB/s of each side's own copy loop. On a VM whose
// host moves the vCPUs between placements, the cached kind's writer falls from ~12 to ~3-4
// GB/s in the far placement while the streaming kind keeps ~10-14 (bench/RESULTS.md, session 11).
//
//   g++ -O2 -std=c++20 -o /tmp/stage_model bench/stage_model.cpp && /tmp/stage_model [rounds]
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr size_t kSlot = size_t{2} << 20, kSlots = 3, kTotal = size_t{128} << 20;
using Clock = std::chrono::steady_clock;

struct Ctl {
  alignas(64) std::atomic<uint64_t> full[kSlots];   // slot holds chunk (value - 1)
  alignas(64) std::atomic<uint64_t> freed[kSlots];  // reader done with chunk (value - 1)
  alignas(64) std::atomic<int> go;                  // round start handshake
  alignas(64) std::atomic<long> writer_rate;        // writer's copy rate, MB/s (0: none yet)
};

void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  sched_setaffinity(0, sizeof s, &s);
}

// 32-byte vectors (AVX2): cached or streaming stores, then a fence for the latter.
__attribute__((target("avx2"))) void copy(uint8_t* d, const uint8_t* s, size_t n, bool nt) {
  for (size_t i = 0; i < n; i += 64) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    if (nt) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), a);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
    }
  }
  if (nt) _mm_sfence();
}

double gbps(size_t bytes, double ns) { return static_cast<double>(bytes) / ns; }

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 10;
  void* c = mmap(nullptr, sizeof(Ctl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  void* r = mmap(nullptr, kSlot * kSlots, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                 0);
  if (c == MAP_FAILED || r == MAP_FAILED) return 1;
  auto* ctl = new (c) Ctl();
  auto* ring = static_cast<uint8_t*>(r);
  std::memset(ring, 0, kSlot * kSlots);
  const pid_t pid = fork();
  const bool writer = pid != 0;
  pin(writer ? 0 : 1);
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(4096, kTotal));
  std::memset(buf, writer ? 1 : 0, kTotal);
  uint64_t seq = 0;
  for (int round = 0; round < rounds * 2; ++round) {
    const bool nt_stage = round & 1;
    if (writer) {  // start together
      while (ctl->go.load() != 2 * round + 1) {
      }
      ctl->go.store(2 * round + 2);
    } else {
      ctl->go.store(2 * round + 1);
      while (ctl->go.load() != 2 * round + 2) {
      }
    }
    const auto t0 = Clock::now();
    double copy_ns = 0;
    for (size_t off = 0; off < kTotal; off += kSlot, ++seq) {
      const size_t s = seq % kSlots;
      if (writer) {
        while (ctl->freed[s].load(std::memory_order_acquire) + kSlots <= seq) {
        }
        const auto c0 = Clock::now();
        copy(ring + s * kSlot, buf + off, kSlot, nt_stage);
        copy_ns += std::chrono::duration<double, std::nano>(Clock::now() - c0).count();
        ctl->full[s].store(seq + 1, std::memory_order_release);
      } else {
        while (ctl->full[s].load(std::memory_order_acquire) != seq + 1) {
        }
        const auto c0 = Clock::now();
        copy(buf + off, ring + s * kSlot, kSlot, true);
        copy_ns += std::chrono::duration<double, std::nano>(Clock::now() - c0).count();
        ctl->freed[s].store(seq + 1, std::memory_order_release);
      }
    }
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    if (writer) {
      ctl->writer_rate.store(static_cast<long>(gbps(kTotal, copy_ns) * 1000));
      while (ctl->writer_rate.load() != 0) {
      }
    } else {
      long w;
      while ((w = ctl->writer_rate.load()) == 0) {
      }
      std::printf("%s %5.1f GB/s (writer's copy %5.1f, reader's %5.1f)%s",
                  nt_stage ? "nt    " : "cached", gbps(kTotal, ns), w / 1000.0,
                  gbps(kTotal, copy_ns), nt_stage ? "\n" : "  |  ");
      std::fflush(stdout);
      ctl->writer_rate.store(0);
    }
  }
  if (writer) waitpid(pid, nullptr, 0);
  return 0;
}
