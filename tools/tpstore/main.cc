// tpstore: a standalone TCPStore server, for jobs whose store should outlive any rank.
//   tpstore --host H --port P [--job-id ID] [--world-size N]
// Workers use it through tprun --store H:P.
// Prints "tpstore listening on H:PORT" once it accepts clients (port 0 picks a free one) and
// runs until SIGINT or SIGTERM.
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "core/cli.h"
#include "net/socket.h"
#include "store/tcp_store_server.h"
#include "tpcomm/error.hpp"

namespace {

constexpr const char* kTool = "tpstore";

int run(int argc, char** argv) {
  std::string host;
  int port = 29500, world_size = -1;
  std::string job_id;
  CLI::App app;
  tpcomm::cli::setup(app, kTool);
  app.description(
      "usage: tpstore [--host HOST] [--port PORT] [--job-id ID] [--world-size N]\n\n"
      "A standalone TCPStore server. Prints 'tpstore listening on HOST:PORT' once it accepts\n"
      "clients and runs until SIGINT or SIGTERM. Workers use it through tprun --store\n"
      "HOST:PORT on every node. Limits: TPCOMM_STORE_* variables.");
  app.add_option("--host", host, "address to listen on (default: every address)")
      ->type_name("HOST");
  app.add_option("--port", port, "port (default 29500; 0 picks a free one)")
      ->type_name("PORT")
      ->check(CLI::Range(0, 65535));
  app.add_option("--job-id", job_id,
                 "job identifier clients must present (default: TPCOMM_JOB_ID, else 'default')")
      ->type_name("ID");
  app.add_option("--world-size", world_size, "report on stdout when N clients have connected")
      ->type_name("N")
      ->check(CLI::Range(1, 1 << 24));
  std::vector<std::string> args(argv + 1, argv + argc);
  tpcomm::cli::argparse_spellings(app, args, kTool);
  switch (tpcomm::cli::parse(app, args, kTool)) {
    case tpcomm::cli::Parsed::Help:
      std::fputs(app.help().c_str(), stdout);
      return 0;
    case tpcomm::cli::Parsed::Version:
      std::printf("%s\n", tpcomm::cli::version_line(kTool).c_str());
      return 0;
    case tpcomm::cli::Parsed::Run:
      break;
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

  {
    tpcomm::TCPStoreServer server(
        tpcomm::TCPStoreServerConfig::from_registry(host, static_cast<uint16_t>(port), job_id));
    std::printf("tpstore listening on %s\n",
                tpcomm::net::join_host_port(host.empty() ? "*" : host, server.port()).c_str());
    std::fflush(stdout);
    bool reported = world_size < 0;
    while (true) {
      timespec tick{0, 100 * 1000 * 1000};
      int sig = sigtimedwait(&stop_signals, nullptr, &tick);
      // Joins are reported before a stop that came in the same tick: a short job can connect,
      // finish and be stopped within one.
      if (!reported && server.workers_joined() >= world_size) {
        std::printf("tpstore: all %d clients connected\n", world_size);
        std::fflush(stdout);
        reported = true;
      }
      if (sig == SIGINT || sig == SIGTERM) {
        std::printf("tpstore stopping (%s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        std::fflush(stdout);
        break;
      }
    }
    server.stop();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return tpcomm::cli::guarded(kTool, std::cerr, [&] { return run(argc, argv); });
}
