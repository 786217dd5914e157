// tcp_floor: what an 8-byte message between two processes over loopback TCP costs on this
// machine, the floor of tpcomm's tcp point-to-point latency and of a 2-rank 8-byte all_reduce
// over tcp. Two pinned processes, TCP_NODELAY, non-blocking sockets read by a busy loop of
// recv() (as tpcomm's hot socket is read), 2,000 rounds per batch, 50 batches:
//   mode 0: ping-pong on one socket (process 0 sends, process 1 answers): one way = round / 2,
//   mode 1: symmetric exchange on one socket (both send, then both receive), per exchange,
//   mode 2: symmetric exchange with a socket per direction (each process sends on the socket
//           it connected and receives on the one it accepted: a 2-rank collective's first
//           call connects that way), per exchange,
//   mode 3: mode 1 with a blocking recv() (the process sleeps in the kernel until data comes),
//   mode 4: mode 2 with TCP_QUICKACK set again after every recv(),
//   mode 5: mode 2 polling the socket with poll() (which does not take the socket's lock) and
//           calling recv() only once it is readable,
//   mode 6: mode 0 (ping-pong) the same way,
//   mode 7: mode 2 with TCP_QUICKACK cleared after every recv() (delayed acknowledgements: the
//           receive-only socket then acknowledges in batches instead of segment by segment),
//   mode 8: mode 7 clearing it after every 16th recv() only.
// Prints min / p25 / median per batch, in us.
//
//   g++ -O2 -std=c++20 -o /tmp/tcp_floor bench/tcp_floor.cpp && /tmp/tcp_floor [mode...]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kRounds = 2000;
constexpr int kBatches = 50;

void die(const char* what) {
  perror(what);
  std::exit(1);
}

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

int listener(uint16_t* port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) die("bind");
  if (listen(fd, 4) != 0) die("listen");
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

void tune(int fd, bool nonblocking) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (nonblocking) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int dial(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) die("connect");
  return fd;
}

void send8(int fd, uint64_t v) {
  if (send(fd, &v, 8, 0) != 8) die("send");
}

uint64_t recv8(int fd, int quickack, bool poll_first = false) {
  uint64_t v = 0;
  size_t got = 0;
  while (got < 8) {
    if (poll_first) {
      pollfd p{fd, POLLIN, 0};
      while (::poll(&p, 1, 0) == 0) {
      }
    }
    ssize_t n = recv(fd, reinterpret_cast<char*>(&v) + got, 8 - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      die("recv");
    }
  }
  static unsigned calls = 0;
  if (quickack >= 0 && (quickack < 2 || ++calls % 16 == 0)) {
    int v = quickack == 2 ? 0 : quickack;
    setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &v, sizeof(v));
  }
  return v;
}

// One process's side; `me` 0 or 1. Returns per-batch us per round (one way for mode 0).
std::vector<double> side(int me, int mode, int out, int in) {
  const int quickack = mode == 4 ? 1 : mode == 7 ? 0 : mode == 8 ? 2 : -1;
  const bool poll_first = mode == 5 || mode == 6;
  std::vector<double> batches;
  for (int b = 0; b < kBatches + 1; ++b) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kRounds; ++i) {
      if (mode == 0 || mode == 6) {
        if (me == 0) {
          send8(out, i);
          recv8(in, -1, poll_first);
        } else {
          uint64_t v = recv8(in, -1, poll_first);
          send8(out, v + 1);
        }
      } else {
        send8(out, i);
        recv8(in, quickack, poll_first);
      }
    }
    double us = std::chrono::duration<double, std::micro>(
                    std::chrono::steady_clock::now() - t0).count() / kRounds;
    if (mode == 0 || mode == 6) us /= 2;
    if (b > 0) batches.push_back(us);  // batch 0 warms up
  }
  return batches;
}

void run(int mode) {
  uint16_t port_a = 0, port_b = 0;
  int la = listener(&port_a);
  int lb = listener(&port_b);
  const bool nonblocking = mode != 3;
  int pipefd[2];
  if (pipe(pipefd) != 0) die("pipe");
  pid_t child = fork();
  if (child < 0) die("fork");
  const int me = child == 0 ? 1 : 0;
  pin(me);
  int out = -1, in = -1;
  if (mode == 2 || mode == 4 || mode == 5 || mode == 7 || mode == 8) {
    // Each process dials its own socket (process 0 to la, process 1 to lb) and sends on it;
    // it receives on the one the other dialed.
    if (me == 0) {
      out = dial(port_a);
      in = accept(lb, nullptr, nullptr);
    } else {
      out = dial(port_b);
      in = accept(la, nullptr, nullptr);
    }
  } else if (me == 0) {
    out = in = dial(port_a);
  } else {
    out = in = accept(la, nullptr, nullptr);
  }
  tune(out, nonblocking);
  if (in != out) tune(in, nonblocking);
  std::vector<double> b = side(me, mode, out, in);
  if (me == 1) {
    if (write(pipefd[1], b.data(), b.size() * sizeof(double)) < 0) die("write");
    std::_Exit(0);
  }
  std::vector<double> other(b.size());
  if (read(pipefd[0], other.data(), other.size() * sizeof(double)) < 0) die("read");
  waitpid(child, nullptr, 0);
  std::sort(b.begin(), b.end());
  std::printf("mode %d: min %.3f  p25 %.3f  median %.3f us\n", mode, b[0], b[b.size() / 4],
              b[b.size() / 2]);
  close(out);
  if (in != out) close(in);
  close(la);
  close(lb);
  close(pipefd[0]);
  close(pipefd[1]);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> modes;
  for (int i = 1; i < argc; ++i) modes.push_back(std::atoi(argv[i]));
  if (modes.empty()) modes = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  for (int m : modes) run(m);
  return 0;
}
