// tprun, the launcher (tensorplay.distributed.launch): starts nproc_per_node workers on this
// node with RANK, LOCAL_RANK, WORLD_SIZE, ... set, prefixes their output, forwards signals,
// and takes the whole job down when one worker fails.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace tpcomm::launch {

/// Where a worker's stdout/stderr go, as torchrun's --redirects / --tee (0 none, 1 stdout,
/// 2 stderr, 3 both).
enum class Streams : int { None = 0, Out = 1, Err = 2, Both = 3 };

/// Parsed command line of tprun.
struct Options {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  ///< 0: pick a free port (single node only).
  bool standalone = false;  ///< One node, free port, local store.
  int max_restarts = 0;
  std::string log_dir;      ///< Per-worker log files (rank_N.log) when set.
  Streams redirects = Streams::None;
  Streams tee = Streams::None;
  std::string rdzv_endpoint;  ///< host:port; overrides master_addr/master_port.
  std::string job_id;         ///< TPCOMM_JOB_ID given to workers; random when empty.
  std::chrono::milliseconds grace{5000};  ///< SIGTERM to SIGKILL when stopping workers.
  bool prefix_output = true;  ///< "[rank N]: " before each line of worker output.
  std::string program;
  std::vector<std::string> args;
};

/// Parses tprun's arguments (argv[0] is the program name). Throws InvalidArgument with a
/// usage hint on a bad flag. Under Slurm or mpirun, node rank and count default from their
/// variables.
Options parse_args(int argc, const char* const* argv);

/// Runs the job; returns the exit status tprun should exit with (0, the failing worker's
/// exit code, or 128 + signal number).
int launch(const Options& options);

/// parse_args + launch, printing errors; what tprun's main() calls.
int main(int argc, const char* const* argv);

}  // namespace tpcomm::launch
