// pipe_model: can a pipe beat cross-memory copies for shm's large put over 4 KiB pages? The
// sender gives its pages to pipes with vmsplice (no copy, no SPLICE_F_GIFT: it keeps its buffer
// untouched until the receiver is done), the receiver read()s them into its own buffer (one
// kernel copy, no remote page pinning). Chunks rotate over several pipes, because a pipe's
// reader holds the pipe mutex while it copies and a single pipe serialises both sides. Prints
// the wall-clock GB/s of 256 MiB beside memcpy of the same buffers in the receiver.
//
//   g++ -O2 -o /tmp/pipe_model bench/pipe_model.cpp && /tmp/pipe_model [MiB] [chunk KiB] [rounds] [pipes]
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A prefaulted buffer on 4 KiB pages.
static char* alloc(size_t n, int fill) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::exit(1);
  madvise(p, n, MADV_NOHUGEPAGE);
  std::memset(p, fill, n);
  return static_cast<char*>(p);
}

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  sched_setaffinity(0, sizeof s, &s);
}

int main(int argc, char** argv) {
  const size_t n = size_t(argc > 1 ? atol(argv[1]) : 256) << 20;
  const size_t chunk = size_t(argc > 2 ? atol(argv[2]) : 1024) << 10;
  const int rounds = argc > 3 ? atoi(argv[3]) : 5;
  const int np = std::clamp(argc > 4 ? atoi(argv[4]) : 4, 1, 16);
  int pp[16][2], go[2], done[2];
  for (int i = 0; i < np; ++i) {
    if (pipe(pp[i]) != 0) return 1;
    fcntl(pp[i][1], F_SETPIPE_SZ, static_cast<int>(chunk));
  }
  if (pipe(go) != 0 || pipe(done) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) {  // the sender
    pin(1);
    char* s = alloc(n, 7);
    char b;
    for (int r = 0; r < rounds; ++r) {
      if (read(go[0], &b, 1) != 1) _exit(1);
      for (size_t c = 0; c * chunk < n; ++c) {
        for (size_t off = c * chunk, end = std::min(n, off + chunk); off < end;) {
          iovec iov{s + off, end - off};
          const ssize_t w = vmsplice(pp[c % np][1], &iov, 1, 0);
          if (w <= 0) _exit(1);
          off += w;
        }
      }
      if (read(done[0], &b, 1) != 1) _exit(1);  // our pages may change only now
    }
    _exit(0);
  }
  pin(0);
  char* dst = alloc(n, 0);
  char* src = alloc(n, 7);
  double best = 1e9, best_memcpy = 1e9;
  for (int r = 0; r < rounds; ++r) {
    double t0 = now();
    std::memcpy(dst, src, n);
    best_memcpy = std::min(best_memcpy, now() - t0);
    std::memset(dst, 0, n);
    t0 = now();
    if (write(go[1], "x", 1) != 1) return 1;
    for (size_t c = 0; c * chunk < n; ++c) {
      for (size_t off = c * chunk, end = std::min(n, off + chunk); off < end;) {
        const ssize_t g = read(pp[c % np][0], dst + off, end - off);
        if (g <= 0) return 1;
        off += g;
      }
    }
    best = std::min(best, now() - t0);
    if (write(done[1], "x", 1) != 1) return 1;
    if (dst[0] != 7 || dst[n - 1] != 7) return 1;
  }
  waitpid(child, nullptr, 0);
  std::printf("%zu MiB, %zu KiB chunks over %d pipes: vmsplice + read %.2f GB/s, memcpy %.2f GB/s"
              " (%.0f%%)\n",
              n >> 20, chunk >> 10, np, n / best / 1e9, n / best_memcpy / 1e9,
              100 * best_memcpy / best);
}
