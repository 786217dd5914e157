// tprun, the launcher (tensorplay.distributed.launch): starts nproc_per_node workers on this
// node with RANK, LOCAL_RANK, WORLD_SIZE, ... set, hosts the job's TCPStore on node 0,
// prefixes the workers' output, forwards signals, and takes the whole node down when one
// worker fails (optionally restarting it a bounded number of times).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tpcomm::launch {

/// Which of a worker's streams a setting applies to, as torchrun's --redirects / --tee
/// values (0 none, 1 stdout, 2 stderr, 3 both).
enum class Streams : int { None = 0, Out = 1, Err = 2, Both = 3 };

/// Parsed command line of tprun. Fields left at their defaults behave as torchrun's.
struct Options {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  ///< 0: pick a free port (single node only).
  bool standalone = false;  ///< One node on 127.0.0.1 with a free port.
  int max_restarts = 0;     ///< Restarts of all local workers after a failure.
  /// Per-worker log files DIR/rank_N/{stdout,stderr}.log, written in addition to the
  /// console unless redirected.
  std::string log_dir;
  /// Streams that go only to the log files (needs log_dir); per_rank entries (by local rank)
  /// override the default for that rank.
  Streams redirects = Streams::None;
  std::map<int, Streams> redirects_per_rank;
  /// Streams written both to the console and the files (needs log_dir; the default whenever
  /// log_dir is set, kept for torchrun compatibility; wins over redirects).
  Streams tee = Streams::None;
  std::map<int, Streams> tee_per_rank;
  std::string rdzv_endpoint;  ///< host[:port]; overrides master_addr/master_port.
  /// --store HOST:PORT: the job's store is an external tpstore there (master_addr and
  /// master_port point at it); no node hosts one, every worker connects as a client.
  bool external_store = false;
  std::string job_id;                     ///< TPCOMM_JOB_ID given to workers; chosen when empty.
  std::chrono::milliseconds grace{5000};  ///< SIGTERM to SIGKILL when stopping workers.
  bool prefix_output = true;              ///< "[rank N]: " before each line of worker output.
  bool help = false;                      ///< -h/--help was given: print usage() and exit 0.
  bool version = false;                   ///< --version was given: print it and exit 0.
  /// --bind-to core: local rank i runs on the i-th CPU tprun may use (wrapping when there are
  /// more ranks than CPUs), as mpirun binds by default; false (none): the scheduler decides,
  /// as under torchrun.
  bool bind_to_core = false;
  /// Where forwarded worker output and tprun's own messages go (tests pass other fds).
  int out_fd = 1;
  int err_fd = 2;
  std::string program;
  std::vector<std::string> args;
};

/// Parses tprun's arguments (argv[0] is the program name). Throws InvalidArgument with a
/// usage hint on a bad flag or value. Under Slurm or mpirun, node rank and count default from
/// their variables; the grace period comes from TPCOMM_LAUNCH_GRACE.
Options parse_args(int argc, const char* const* argv);

/// Runs the job on this node; returns the exit status tprun should exit with (0, the failing
/// worker's exit code, or 128 + signal number). Throws InvalidArgument for an unusable
/// program or options, Error when the store cannot be hosted. Not reentrant: it installs
/// signal handlers for SIGINT, SIGTERM, SIGHUP and SIGCHLD while it runs.
int launch(const Options& options);

/// parse_args + launch, printing errors to stderr; what tprun's main() calls. Returns the
/// process exit status (2 for a bad command line, as argparse).
int main(int argc, const char* const* argv);

/// The --help text.
std::string usage(std::string_view prog = "tprun");

}  // namespace tpcomm::launch
