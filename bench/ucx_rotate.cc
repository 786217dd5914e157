// ucx_rotate: raw UCP tag bandwidth between two processes, like ucx_perftest's tag_bw (a
// sliding window of W sends from one buffer, W receives posted ahead), but with the receives
// spread over R buffers in turn. R = 1 is tag_bw's memory pattern (all W receives into one
// buffer, which stays in the caches); R = W is what an application must do when it keeps W
// receives posted at once, and what tpcomm's p2p_bench --stream W does (two receives posted on
// one buffer are an error there). Comparing tpcomm with R = W gives UCX itself the same memory
// footprint; bench/ucx_compare.sh runs it as its "raw UCX" column. Built as bin/ucx_rotate
// where UCX was found.
//
//   UCX_TLS=tcp bin/ucx_rotate --size 1M --window 32 --buffers 32 [--count 1000] [--reps 5]
//       [--pin]                                  # rank r on CPU r
//       [--alias]   # the R buffers are R views of one memory file (p2p_bench --alias-recv's
//                   # pattern: distinct addresses, one buffer's physical pages)
//
// Prints the sender's GB/s (1e9 B/s) per repetition and their median: time from a handshake
// to the last send completion of `count` messages, after a warm-up of one window (as tag_bw
// measures its "overall" bandwidth on the sender).
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/ucx_bench_util.h"

namespace {

using ucx_bench::die;
using ucx_bench::parse_size;

struct Ucx {
  ucp_context_h ctx = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;
};

Ucx setup(int fd) {
  Ucx u;
  ucp_params_t p{};
  p.field_mask = UCP_PARAM_FIELD_FEATURES;
  p.features = UCP_FEATURE_TAG;
  ucp_config_t* cfg = nullptr;
  if (ucs_status_t st = ucp_config_read(nullptr, nullptr, &cfg); st != UCS_OK)
    die("ucp_config_read", st);
  ucs_status_t st = ucp_init(&p, cfg, &u.ctx);
  ucp_config_release(cfg);
  if (st != UCS_OK) die("ucp_init", st);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  if ((st = ucp_worker_create(u.ctx, &wp, &u.worker)) != UCS_OK) die("ucp_worker_create", st);
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  if ((st = ucp_worker_get_address(u.worker, &addr, &len)) != UCS_OK)
    die("ucp_worker_get_address", st);
  std::vector<uint8_t> peer = ucx_bench::swap_blob(fd, addr, len);
  ucp_worker_release_address(u.worker, addr);
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep.address = reinterpret_cast<const ucp_address_t*>(peer.data());
  if ((st = ucp_ep_create(u.worker, &ep, &u.ep)) != UCS_OK) die("ucp_ep_create", st);
  return u;
}

// Waits for a request (nullptr: completed at once) and frees it; gives up after 60 s (the
// peer died or hangs).
void wait(ucp_worker_h w, void* req) {
  if (req == nullptr) return;
  if (UCS_PTR_IS_ERR(req)) die("operation failed", UCS_PTR_STATUS(req));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (unsigned spins = 0; ucp_request_check_status(req) == UCS_INPROGRESS; ++spins) {
    ucp_worker_progress(w);
    if ((spins & 1023) == 0 && std::chrono::steady_clock::now() > deadline)
      die("no completion within 60 s: is the other process still running?");
  }
  const ucs_status_t st = ucp_request_check_status(req);
  ucp_request_free(req);
  if (st != UCS_OK) die("operation completed with an error", st);
}

void* send(Ucx& u, const void* buf, size_t n, ucp_tag_t tag) {
  ucp_request_param_t rp{};
  return ucp_tag_send_nbx(u.ep, buf, n, tag, &rp);
}
void* recv(Ucx& u, void* buf, size_t n, ucp_tag_t tag) {
  ucp_request_param_t rp{};
  return ucp_tag_recv_nbx(u.worker, buf, n, tag, ~ucp_tag_t{0}, &rp);
}

// A small message each way: both sides are at the same point.
void line_up(Ucx& u, int rank) {
  char x = 0;
  if (rank == 0) {
    wait(u.worker, send(u, &x, 1, 7));
    wait(u.worker, recv(u, &x, 1, 8));
  } else {
    wait(u.worker, recv(u, &x, 1, 7));
    wait(u.worker, send(u, &x, 1, 8));
  }
}

// `count` messages through a window of `window`; the receiver cycles over `bufs`.
double stream(Ucx& u, int rank, size_t size, int window, int count, char* sbuf,
              std::vector<char*>& bufs) {
  line_up(u, rank);
  std::vector<void*> reqs(static_cast<size_t>(window), nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) {
    void*& r = reqs[static_cast<size_t>(i % window)];
    wait(u.worker, r);
    r = rank == 0 ? send(u, sbuf, size, 1)
                  : recv(u, bufs[static_cast<size_t>(i) % bufs.size()], size, 1);
    if (UCS_PTR_IS_ERR(r)) die("post failed", UCS_PTR_STATUS(r));
  }
  for (void*& r : reqs) wait(u.worker, r);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  line_up(u, rank);
  return static_cast<double>(size) * count / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  ucx_bench::g_prog = "ucx_rotate";
  size_t size = 1 << 20;
  int window = 32, nbufs = 32, count = 0, reps = 5;
  bool pin = false, alias = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) die("missing value");
      return argv[++i];
    };
    if (a == "--size")
      size = parse_size(next());
    else if (a == "--window")
      window = std::max(1, std::atoi(next()));
    else if (a == "--buffers")
      nbufs = std::max(1, std::atoi(next()));
    else if (a == "--count")
      count = std::max(1, std::atoi(next()));
    else if (a == "--reps")
      reps = std::max(1, std::atoi(next()));
    else if (a == "--pin")
      pin = true;
    else if (a == "--alias")
      alias = true;
    else
      die("usage: ucx_rotate [--size N] [--window W] [--buffers R] [--count C] [--reps K] [--pin] "
          "[--alias]");
  }
  if (count == 0) count = static_cast<int>(std::max<size_t>(2 * window, (1ull << 30) / size));
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) die("socketpair failed");
  const pid_t pid = ::fork();
  if (pid < 0) die("fork failed");
  const int rank = pid == 0 ? 1 : 0;
  const int fd = sv[rank == 0 ? 0 : 1];
  ::close(sv[rank == 0 ? 1 : 0]);
  if (pin) {  // rank r on CPU r, as tag_bw's client and server under bench/ucx_compare.sh PIN=1
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(rank, &set);
    sched_setaffinity(0, sizeof set, &set);
  }
  Ucx u = setup(fd);
  // Real, written pages on both sides (page-aligned, as ucp_mem_map gives tag_bw).
  char* sbuf = static_cast<char*>(std::aligned_alloc(4096, (size + 4095) / 4096 * 4096));
  std::memset(sbuf, 1, size);
  std::vector<char*> bufs;
  const size_t span = (size + 4095) / 4096 * 4096;
  if (rank == 1 && alias) {
    int mfd = ::memfd_create("ucx_rotate_views", MFD_CLOEXEC);
    if (mfd < 0 || ::ftruncate(mfd, static_cast<off_t>(span)) != 0) die("memfd failed");
    for (int b = 0; b < nbufs; ++b) {
      void* v = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
      if (v == MAP_FAILED) die("mmap of the memory file failed");
      bufs.push_back(static_cast<char*>(v));
      std::memset(bufs.back(), 2, size);
    }
    ::close(mfd);
  } else if (rank == 1) {
    for (int b = 0; b < nbufs; ++b) {
      bufs.push_back(static_cast<char*>(std::aligned_alloc(4096, span)));
      std::memset(bufs.back(), 2, size);
    }
  }
  stream(u, rank, size, window, window, sbuf, bufs);  // warm-up
  std::vector<double> bw;
  for (int r = 0; r < reps; ++r) bw.push_back(stream(u, rank, size, window, count, sbuf, bufs));
  if (rank == 0) {
    std::printf("ucx_rotate size %zu window %d buffers %d count %d:", size, window, nbufs, count);
    for (double b : bw) std::printf(" %.2f", b);
    std::sort(bw.begin(), bw.end());
    std::printf("  median %.2f GB/s\n", bw[bw.size() / 2]);
  }
  // Close after a last line-up; the peer may be gone by then, so the close's status is not
  // checked.
  line_up(u, rank);
  ucp_request_param_t cp{};
  void* close = ucp_ep_close_nbx(u.ep, &cp);
  if (close != nullptr && !UCS_PTR_IS_ERR(close)) {
    while (ucp_request_check_status(close) == UCS_INPROGRESS) ucp_worker_progress(u.worker);
    ucp_request_free(close);
  }
  ucp_worker_destroy(u.worker);
  ucp_cleanup(u.ctx);
  if (rank == 0) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  return 0;
}
