// cma_model: CPU-time cost per byte of the copies of shm_direct's large broadcast and
// all_gather, measured one after another on one thread, so that a loaded machine still gives
// usable ratios (wall-clock collectives do not). Prints each copy's GB/s of CPU time and the
// broadcast of 256 MiB from a root out of place predicted per mode as max(root, reader):
// staged (root copies in and out of a 2 MiB staging chunk, reader copies out), split (rounds of
// a staged chunk and 2/3 of a chunk the reader reads with process_vm_readv while the root
// copies it), direct (reader reads all with process_vm_readv, root copies all).
//
//   g++ -O2 -o /tmp/cma_model bench/cma_model.cpp && /tmp/cma_model
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

static double cpu() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main() {
  const size_t n = 256ul << 20, C = 2ul << 20, D = C * 2 / 3 / 64 * 64;
  int p[2], q[2];
  if (pipe(p) != 0 || pipe(q) != 0) return 1;
  pid_t pid = fork();
  if (pid == 0) {  // the owner: its tensor, read with process_vm_readv
    char* src = static_cast<char*>(aligned_alloc(4096, n));
    memset(src, 1, n);
    if (write(q[1], &src, sizeof src) != sizeof src) _exit(1);
    char c;
    if (read(p[0], &c, 1) < 0) _exit(1);
    _exit(0);
  }
  char* rsrc = nullptr;
  if (read(q[0], &rsrc, sizeof rsrc) != sizeof rsrc) return 1;
  char* src = static_cast<char*>(aligned_alloc(4096, n));
  char* dst = static_cast<char*>(aligned_alloc(4096, n));
  char* st = static_cast<char*>(aligned_alloc(4096, C));
  memset(src, 1, n);
  memset(dst, 2, n);
  memset(st, 3, C);
  auto pvm = [&](char* d, size_t off, size_t len) {
    iovec l{d, len}, r{rsrc + off, len};
    if (process_vm_readv(pid, &l, 1, &r, 1, 0) != static_cast<ssize_t>(len)) perror("pvm");
  };
  std::vector<double> mc, rd_all, staged2, cache, staged, split, direct;
  for (int rep = 0; rep < 5; ++rep) {
    double t0 = cpu();
    memcpy(dst, src, n);
    const double t_memcpy = cpu() - t0;
    t0 = cpu();
    for (size_t off = 0; off < n; off += 64 << 20) pvm(dst + off, off, 64 << 20);
    const double t_pvm = cpu() - t0;
    t0 = cpu();
    for (size_t off = 0; off < n; off += C) {
      memcpy(st, src + off, C);
      memcpy(dst + off, st, C);
    }
    const double t_staged2 = cpu() - t0;
    t0 = cpu();
    for (size_t off = 0; off < n; off += C) memcpy(dst + off, st, C);
    const double t_cache = cpu() - t0;
    t0 = cpu();
    for (size_t off = 0; off < n;) {
      size_t c = std::min(C, n - off);
      memcpy(st, src + off, c);
      memcpy(dst + off, st, c);
      off += c;
      if (off < n) {
        size_t d = std::min(D, n - off);
        memcpy(dst + off, src + off, d);
        off += d;
      }
    }
    const double split_root = cpu() - t0;
    t0 = cpu();
    for (size_t off = 0; off < n;) {
      size_t c = std::min(C, n - off);
      memcpy(dst + off, st, c);
      off += c;
      if (off < n) {
        size_t d = std::min(D, n - off);
        pvm(dst + off, off, d);
        off += d;
      }
    }
    const double split_reader = cpu() - t0;
    mc.push_back(t_memcpy);
    rd_all.push_back(t_pvm);
    staged2.push_back(t_staged2);
    cache.push_back(t_cache);
    staged.push_back(std::max(t_staged2, t_cache));
    split.push_back(std::max(split_root, split_reader));
    direct.push_back(std::max(t_memcpy, t_pvm));
  }
  auto show = [&](const char* what, std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    printf("%-44s best %5.2f  median %5.2f GB/s\n", what, n / v[0] / 1e9,
           n / v[v.size() / 2] / 1e9);
  };
  show("memcpy", mc);
  show("process_vm_readv", rd_all);
  show("copy in and out of 2 MiB staging", staged2);
  show("copy out of cached staging", cache);
  show("broadcast oop predicted: staged", staged);
  show("broadcast oop predicted: split", split);
  show("broadcast oop predicted: direct", direct);
  if (write(p[1], "x", 1) != 1) return 1;
  wait(nullptr);
  return 0;
}
