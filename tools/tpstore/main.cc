// tpstore: a standalone TCPStore server, for jobs whose store should outlive any rank.
//   tpstore --host H --port P [--job-id ID] [--world-size N]
// Prints "tpstore listening on H:PORT" once it accepts clients (port 0 picks a free one) and
// runs until SIGINT or SIGTERM.
#include <signal.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "net/socket.h"
#include "store/tcp_store_server.h"
#include "tpcomm/error.hpp"

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: tpstore [--host HOST] [--port PORT] [--job-id ID] [--world-size N]\n"
               "  --host HOST       address to listen on (default: every address)\n"
               "  --port PORT       port (default 29500; 0 picks a free one)\n"
               "  --job-id ID       job identifier clients must present (default: "
               "TPCOMM_JOB_ID, else 'default')\n"
               "  --world-size N    report on stdout when N clients have connected\n"
               "Runs until SIGINT or SIGTERM. Limits: TPCOMM_STORE_* variables.\n");
}

bool parse_int(const char* s, long lo, long hi, long* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string host;
  long port = 29500, world_size = -1;
  std::string job_id;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "tpstore: %s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    } else if (a == "--host") {
      host = value("--host");
    } else if (a == "--port") {
      if (!parse_int(value("--port"), 0, 65535, &port)) {
        std::fprintf(stderr, "tpstore: --port needs a number in 0..65535, got '%s'\n", argv[i]);
        return 2;
      }
    } else if (a == "--job-id") {
      job_id = value("--job-id");
    } else if (a == "--world-size") {
      if (!parse_int(value("--world-size"), 1, 1 << 24, &world_size)) {
        std::fprintf(stderr, "tpstore: --world-size needs a positive number, got '%s'\n", argv[i]);
        return 2;
      }
    } else {
      std::fprintf(stderr, "tpstore: unknown argument '%s'\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }

  // A store serves one connection per rank: allow as many descriptors as the system lets us.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  // Block the stop signals before the server thread starts, so that it inherits the mask and
  // the main thread receives them in sigtimedwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  try {
    tpcomm::TCPStoreServer server(
        tpcomm::TCPStoreServerConfig::from_registry(host, static_cast<uint16_t>(port), job_id));
    std::printf("tpstore listening on %s\n",
                tpcomm::net::join_host_port(host.empty() ? "*" : host, server.port()).c_str());
    std::fflush(stdout);
    bool reported = world_size < 0;
    while (true) {
      timespec tick{0, 100 * 1000 * 1000};
      int sig = sigtimedwait(&stop_signals, nullptr, &tick);
      if (sig == SIGINT || sig == SIGTERM) {
        std::printf("tpstore stopping (%s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        std::fflush(stdout);
        break;
      }
      if (!reported && server.workers_joined() >= world_size) {
        std::printf("tpstore: all %ld clients connected\n", world_size);
        std::fflush(stdout);
        reported = true;
      }
    }
    server.stop();
  } catch (const tpcomm::Error& e) {
    std::fprintf(stderr, "tpstore: %s\n", e.what());
    return 1;
  }
  return 0;
}
