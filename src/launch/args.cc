// tprun's command line: torchrun's flags (dash or underscore spellings, "--flag value" or
// "--flag=value"), defaults from Slurm / mpirun variables, and errors that say which flag
// was wrong and what it takes.
#include <unistd.h>

#include <optional>
#include <string>
#include <string_view>

#include "core/cli.h"
#include "core/config.h"
#include "core/log.h"
#include "launch/launch_internal.h"
#include "tpcomm/error.hpp"
#include "tpcomm/launch.hpp"

namespace tpcomm::launch {

namespace {

constexpr std::string_view kTool = "tprun";

[[noreturn]] void bad(const std::string& what) { cli::usage_error(kTool, what); }

int parse_int_flag(std::string_view flag, const std::string& value, int64_t lo, int64_t hi,
                   std::string_view expect) {
  auto v = config::parse_int(value);
  if (!v || *v < lo || *v > hi)
    bad(std::string(flag) + " '" + value + "' is not " + std::string(expect));
  return static_cast<int>(*v);
}

int parse_nproc(const std::string& value) {
  if (value == "cpu") {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<int>(n) : 1;
  }
  if (value == "gpu" || value == "auto")
    bad("--nproc-per-node '" + value +
        "' is not supported (tprun does not count GPUs); give a number, or 'cpu' for one "
        "worker per CPU");
  return parse_int_flag("--nproc-per-node", value, 1, 1 << 20,
                        "a positive number of workers (or 'cpu')");
}

int parse_nnodes(const std::string& value) {
  // torchrun's elastic form MIN:MAX is accepted when MIN == MAX.
  size_t colon = value.find(':');
  if (colon != std::string::npos) {
    int lo = parse_int_flag("--nnodes", value.substr(0, colon), 1, 1 << 20,
                            "a positive number of nodes");
    int hi = parse_int_flag("--nnodes", value.substr(colon + 1), 1, 1 << 20,
                            "a positive number of nodes");
    if (lo != hi)
      bad("--nnodes '" + value +
          "': elastic node ranges are not supported; give a fixed count (e.g. --nnodes " +
          std::to_string(hi) + ")");
    return lo;
  }
  return parse_int_flag("--nnodes", value, 1, 1 << 20, "a positive number of nodes");
}

Streams parse_stream_value(std::string_view flag, const std::string& whole, const std::string& v) {
  auto i = config::parse_int(v);
  if (!i || *i < 0 || *i > 3)
    bad(std::string(flag) + " '" + whole +
        "' is not one of 0 (none), 1 (stdout), 2 (stderr), 3 (both), or a per-rank list "
        "like 0:1,1:2");
  return static_cast<Streams>(*i);
}

// "3" or "0:1,1:2" (local rank:streams).
void parse_streams(std::string_view flag, const std::string& value, Streams* all,
                   std::map<int, Streams>* per_rank) {
  if (value.find(':') == std::string::npos) {
    *all = parse_stream_value(flag, value, value);
    return;
  }
  size_t start = 0;
  while (start <= value.size()) {
    size_t end = value.find(',', start);
    if (end == std::string::npos) end = value.size();
    std::string item = value.substr(start, end - start);
    size_t colon = item.find(':');
    if (colon == std::string::npos)
      bad(std::string(flag) + " '" + value + "': item '" + item +
          "' is not LOCAL_RANK:STREAMS (e.g. 0:1,1:2)");
    int rank = parse_int_flag(flag, item.substr(0, colon), 0, 1 << 20,
                              "a local rank (in LOCAL_RANK:STREAMS)");
    (*per_rank)[rank] = parse_stream_value(flag, value, item.substr(colon + 1));
    start = end + 1;
  }
}

// host, [v6], host:port, [v6]:port.
void parse_endpoint(const std::string& value, std::string* host, std::optional<int>* port,
                    const std::string& flag = "--rdzv-endpoint") {
  std::string h = value;
  std::string p;
  if (!h.empty() && h.front() == '[') {
    size_t close = h.find(']');
    if (close == std::string::npos)
      bad(flag + " '" + value + "' has an unclosed '[' (use [v6addr]:port)");
    std::string rest = h.substr(close + 1);
    h = h.substr(1, close - 1);
    if (!rest.empty()) {
      if (rest.front() != ':') bad(flag + " '" + value + "' is not [v6addr]:port");
      p = rest.substr(1);
    }
  } else {
    size_t colon = h.rfind(':');
    if (colon != std::string::npos && h.find(':') == colon) {
      p = h.substr(colon + 1);
      h = h.substr(0, colon);
    }
  }
  if (h.empty()) bad(flag + " '" + value + "' has no host (use host:port)");
  *host = h;
  if (!p.empty()) *port = parse_int_flag(flag, p, 0, 65535, "host:port with a port in 0..65535");
}

// Where node rank and count come from when not given: mpirun, PMI, then Slurm.
struct NodeEnv {
  std::string source;
  int nnodes;
  int node_rank;
};

std::optional<NodeEnv> node_env() {
  struct Source {
    const char* size;
    const char* rank;
  };
  constexpr Source kSources[] = {{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
                                 {"PMI_SIZE", "PMI_RANK"},
                                 {"SLURM_NNODES", "SLURM_NODEID"}};
  for (const Source& s : kSources) {
    if (!config::is_set(s.size) || !config::is_set(s.rank)) continue;
    NodeEnv e;
    e.nnodes = static_cast<int>(config::get_int(s.size));
    e.node_rank = static_cast<int>(config::get_int(s.rank));
    e.source = std::string(s.size) + "=" + std::to_string(e.nnodes) + ", " + s.rank + "=" +
               std::to_string(e.node_rank);
    return e;
  }
  return std::nullopt;
}

// The values as given, before the checks that span several flags.
struct Given {
  std::string nproc, nnodes, redirects, tee, rdzv_endpoint, rdzv_backend, bind_to, store;
  std::string run_id, rdzv_id, job_id;
  bool no_prefix = false;
};

void add_options(CLI::App& app, Options& o, Given& g) {
  app.add_option("--nproc-per-node", g.nproc,
                 "workers on this node (default 1; 'cpu': one per CPU)")
      ->type_name("N");
  app.add_option("--nnodes", g.nnodes,
                 "nodes in the job (default 1, or from Slurm/mpirun; MIN:MAX with MIN = MAX)")
      ->type_name("N");
  app.add_option("--node-rank", o.node_rank,
                 "this node's index, 0..nnodes-1 (default 0, or from Slurm/mpirun)")
      ->type_name("R")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--master-addr", o.master_addr, "address of node 0 (default 127.0.0.1)")
      ->type_name("A");
  app.add_option("--master-port", o.master_port,
                 "port of the store on node 0 (default 29500; 0: a free port, one node only)")
      ->type_name("P")
      ->check(CLI::Range(0, 65535));
  app.add_flag("--standalone", o.standalone, "one node on 127.0.0.1 with a free port");
  app.add_option("--rdzv-endpoint", g.rdzv_endpoint,
                 "host[:port]: same as --master-addr host --master-port port")
      ->type_name("H:P");
  app.add_option("--store", g.store,
                 "use the external tpstore at HOST:PORT (started with tpstore --host HOST --port "
                 "PORT): no node hosts a store, every worker connects to it")
      ->type_name("HOST:PORT");
  app.add_option("--rdzv-backend", g.rdzv_backend,
                 "c10d or static (torchrun's spellings; both mean the TCPStore tprun hosts on "
                 "node 0)")
      ->type_name("NAME")
      ->check(CLI::IsMember({"c10d", "static"}));
  app.add_option("--run-id", g.run_id,
                 "job id given to workers as TPCOMM_JOB_ID (default: TPCOMM_JOB_ID, "
                 "SLURM_JOB_ID, else random)")
      ->type_name("ID");
  app.add_option("--rdzv-id", g.rdzv_id, "same as --run-id")->type_name("ID");
  app.add_option("--job-id", g.job_id, "same as --run-id")->type_name("ID");
  app.add_option("--max-restarts", o.max_restarts,
                 "restart all workers of this node up to N times after a failure")
      ->type_name("N")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--log-dir", o.log_dir,
                 "also write each worker's output to DIR/rank_N/{stdout,stderr}.log")
      ->type_name("DIR");
  app.add_option("--redirects", g.redirects,
                 "send stream(s) S only to the log files: 0 none, 1 stdout, 2 stderr, 3 both, "
                 "or per local rank: 0:3,1:2")
      ->type_name("S");
  app.add_option("--tee", g.tee,
                 "write stream(s) S to console and files (the default with --log-dir)")
      ->type_name("S");
  app.add_flag("--no-prefix", g.no_prefix, "do not put \"[rank N]: \" before worker output");
  app.add_option("--bind-to", g.bind_to,
                 "core: pin local rank i to the i-th CPU tprun may use (as mpirun binds); "
                 "none: let the scheduler place workers (default)")
      ->type_name("core|none")
      ->check(CLI::IsMember({"core", "none"}));
}

std::string describe_app(CLI::App& app, std::string_view prog) {
  app.description(
      "usage: " + std::string(prog) + " [options] PROGRAM [ARGS...]\n       " + std::string(prog) +
      " [options] -- PROGRAM [ARGS...]\n\n"
      "Starts nproc-per-node copies of PROGRAM on this node with RANK, LOCAL_RANK, WORLD_SIZE,\n"
      "LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT and TPCOMM_JOB_ID set. Node 0\n"
      "hosts the job's TCPStore on the master port; workers reach it through env://. When a\n"
      "worker fails, the others on this node are stopped and tprun exits with the failing\n"
      "worker's status.\n"
      "Options take torchrun's spellings: --nproc_per_node, --nproc-per-node=2, --nproc.");
  std::string footer =
      "environment: TPCOMM_LAUNCH_GRACE (SIGTERM to SIGKILL grace, default 5s).\n"
      "exit status: 0, the failing worker's exit code, or 128+signal; 2 for a bad command "
      "line.";
  app.footer(footer);
  return footer;
}

// Where the program starts in args: the first argument that is not an option or an option's
// value, or the one after "--".
size_t program_index(const CLI::App& app, const std::vector<std::string>& args, bool* dashdash) {
  *dashdash = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      *dashdash = true;
      return i;
    }
    if (a.empty() || a.front() != '-' || a == "-") return i;
    const CLI::Option* opt = cli::find_option(app, a);
    if (opt && opt->get_items_expected_max() > 0 && a.find('=') == std::string::npos) ++i;
  }
  return args.size();
}

// The flags' values into `o` (those whose parsing is ours); returns the --rdzv-endpoint host
// and port when given.
void apply_given(const CLI::App& app, const Given& g, Options& o,
                 std::optional<std::string>* rdzv_host, std::optional<int>* rdzv_port) {
  auto given = [&](const char* name) { return app.count(name) > 0; };
  if (given("--nproc-per-node")) o.nproc_per_node = parse_nproc(g.nproc);
  if (given("--nnodes")) o.nnodes = parse_nnodes(g.nnodes);
  if (given("--redirects"))
    parse_streams("--redirects", g.redirects, &o.redirects, &o.redirects_per_rank);
  if (given("--tee")) parse_streams("--tee", g.tee, &o.tee, &o.tee_per_rank);
  if (given("--rdzv-endpoint")) {
    if (g.rdzv_endpoint.empty()) bad("--rdzv-endpoint needs a non-empty value");
    o.rdzv_endpoint = g.rdzv_endpoint;
    std::string h;
    parse_endpoint(g.rdzv_endpoint, &h, rdzv_port);
    *rdzv_host = h;
  }
  if (given("--store")) {
    if (o.standalone || given("--rdzv-endpoint") || given("--master-addr") ||
        given("--master-port"))
      bad("--store names the job's store; it does not go with --standalone, --rdzv-endpoint, "
          "--master-addr or --master-port");
    std::string h;
    std::optional<int> p;
    parse_endpoint(g.store, &h, &p, "--store");
    if (!p) bad("--store '" + g.store + "' has no port (use HOST:PORT, as tpstore printed it)");
    o.master_addr = h;
    o.master_port = *p;
    o.external_store = true;
  }
  for (const std::string* id : {&g.run_id, &g.rdzv_id, &g.job_id})
    if (!id->empty()) o.job_id = *id;
  if (g.no_prefix) o.prefix_output = false;
  if (given("--bind-to")) o.bind_to_core = g.bind_to == "core";
}

// Node count, index and master: --standalone, --rdzv-endpoint, else the flags and the
// launcher's environment (mpirun, PMI, Slurm).
void resolve_layout(const CLI::App& app, Options& o, const std::optional<std::string>& rdzv_host,
                    const std::optional<int>& rdzv_port) {
  auto given = [&](const char* name) { return app.count(name) > 0; };
  if (o.standalone) {
    if (given("--nnodes") && o.nnodes != 1)
      bad("--standalone runs one node, but --nnodes is " + std::to_string(o.nnodes));
    if (given("--node-rank") && o.node_rank != 0)
      bad("--standalone runs one node, but --node-rank is " + std::to_string(o.node_rank));
    o.nnodes = 1;
    o.node_rank = 0;
    o.master_addr = "127.0.0.1";
    o.master_port = 0;
    return;
  }
  if (rdzv_host) {
    if (given("--master-addr") && o.master_addr != *rdzv_host)
      bad("--rdzv-endpoint host '" + *rdzv_host + "' disagrees with --master-addr '" +
          o.master_addr + "'; give one of them");
    o.master_addr = *rdzv_host;
    if (rdzv_port) o.master_port = *rdzv_port;
  }
  bool have_nnodes = given("--nnodes");
  bool have_rank = given("--node-rank");
  std::string origin = "--node-rank " + std::to_string(o.node_rank);
  if (!have_nnodes || !have_rank) {
    if (auto e = node_env()) {
      TPLOG(INFO, LAUNCH) << "tprun: node layout from the environment: " << e->source;
      if (!have_nnodes) o.nnodes = e->nnodes;
      if (!have_rank) {
        o.node_rank = e->node_rank;
        origin = "node rank " + std::to_string(o.node_rank) + " (from " + e->source + ")";
      }
    }
  }
  if (o.node_rank >= o.nnodes)
    bad(origin + " is out of range for " + std::to_string(o.nnodes) +
        (o.nnodes == 1 ? " node" : " nodes") + " (node ranks are 0.." +
        std::to_string(o.nnodes - 1) + ")");
  if (o.master_port == 0 && o.nnodes > 1 && !o.external_store)
    bad("--master-port 0 (a free port) works only on one node; the other nodes must know "
        "the port: give a fixed --master-port");
}

// Output streams, the program, the job id and the grace period.
void finish(Options& o) {
  if (o.log_dir.empty()) {
    if (o.redirects != Streams::None || !o.redirects_per_rank.empty())
      bad("--redirects sends worker output to files: give --log-dir DIR too");
    if (o.tee != Streams::None || !o.tee_per_rank.empty())
      bad("--tee copies worker output to files: give --log-dir DIR too");
  }
  for (const auto* m : {&o.redirects_per_rank, &o.tee_per_rank})
    for (const auto& [rank, s] : *m)
      if (rank >= o.nproc_per_node)
        bad(std::string(m == &o.redirects_per_rank ? "--redirects" : "--tee") + ": local rank " +
            std::to_string(rank) + " is out of range for --nproc-per-node " +
            std::to_string(o.nproc_per_node));
  if (o.program.empty()) bad("no program to run: tprun [options] PROGRAM [ARGS...]");
  if (o.job_id.empty()) {
    if (o.external_store && !config::is_set("TPCOMM_JOB_ID")) {
      o.job_id = "default";  // tpstore's own default
    } else if (config::is_set("TPCOMM_JOB_ID")) {
      o.job_id = config::get_string("TPCOMM_JOB_ID");
    } else if (config::is_set("SLURM_JOB_ID")) {
      o.job_id = "slurm-" + config::get_string("SLURM_JOB_ID");
    }
  }
  o.grace = config::get_duration("TPCOMM_LAUNCH_GRACE");
}

}  // namespace

Options parse_args(int argc, const char* const* argv) {
  Options o;
  Given g;
  CLI::App app;
  cli::setup(app, kTool);
  add_options(app, o, g);
  describe_app(app, kTool);
  std::vector<std::string> args(argv + 1, argv + argc);
  cli::argparse_spellings(app, args, kTool);
  bool dashdash = false;
  size_t prog = program_index(app, args, &dashdash);
  std::vector<std::string> own(args.begin(), args.begin() + static_cast<long>(prog));
  size_t first = prog + (dashdash ? 1 : 0);
  if (first < args.size()) {
    o.program = args[first];
    o.args.assign(args.begin() + static_cast<long>(first) + 1, args.end());
  }
  switch (cli::parse(app, own, kTool)) {
    case cli::Parsed::Help:
      o.help = true;
      return o;
    case cli::Parsed::Version:
      o.version = true;
      return o;
    case cli::Parsed::Run:
      break;
  }
  std::optional<std::string> rdzv_host;
  std::optional<int> rdzv_port;
  apply_given(app, g, o, &rdzv_host, &rdzv_port);
  resolve_layout(app, o, rdzv_host, rdzv_port);
  finish(o);
  return o;
}

std::string usage(std::string_view prog) {
  Options o;
  Given g;
  CLI::App app;
  cli::setup(app, prog);
  add_options(app, o, g);
  describe_app(app, prog);
  return app.help();
}

}  // namespace tpcomm::launch
