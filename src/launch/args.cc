// tprun's command line: torchrun's flags (dash or underscore spellings, "--flag value" or
// "--flag=value"), defaults from Slurm / mpirun variables, and errors that say which flag
// was wrong and what it takes.
#include <unistd.h>

#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "core/config.h"
#include "core/log.h"
#include "launch/launch_internal.h"
#include "tpcomm/error.hpp"
#include "tpcomm/launch.hpp"

namespace tpcomm::launch {

namespace {

constexpr std::string_view kHint = "run 'tprun --help' for usage";

// One accepted flag (canonical dash spelling).
struct FlagSpec {
  std::string_view name;
  bool takes_value;
};

constexpr FlagSpec kFlags[] = {
    {"--nproc-per-node", true}, {"--nnodes", true},
    {"--node-rank", true},      {"--master-addr", true},
    {"--master-port", true},    {"--standalone", false},
    {"--max-restarts", true},   {"--log-dir", true},
    {"--redirects", true},      {"--tee", true},
    {"--rdzv-endpoint", true},  {"--rdzv-backend", true},
    {"--rdzv-id", true},        {"--run-id", true},
    {"--job-id", true},         {"--no-prefix", false},
    {"--bind-to", true},        {"--help", false},
};

[[noreturn]] void bad(const std::string& what) {
  throw InvalidArgument("tprun: " + what + "; " + std::string(kHint));
}

// The flag named exactly, else the only one `name` abbreviates (as argparse allows:
// --nproc for --nproc-per-node). nullptr if none or ambiguous.
const FlagSpec* find_flag(std::string_view name) {
  const FlagSpec* prefix_of = nullptr;
  int matches = 0;
  for (const FlagSpec& f : kFlags) {
    if (f.name == name) return &f;
    if (name.size() > 2 && f.name.substr(0, name.size()) == name) {
      prefix_of = &f;
      ++matches;
    }
  }
  return matches == 1 ? prefix_of : nullptr;
}

// "--nproc_per_node" -> "--nproc-per-node" (underscores after the leading dashes).
std::string normalize(std::string_view flag) {
  std::string out(flag);
  for (size_t i = 2; i < out.size(); ++i)
    if (out[i] == '_') out[i] = '-';
  return out;
}

// A suggestion for a mistyped flag: the nearest by edit distance, else the one sharing the
// longest start (--nprocs -> --nproc-per-node); "" when nothing is close.
std::string nearest_flag(std::string_view name) {
  std::string best;
  size_t best_d = SIZE_MAX;
  std::string longest;
  size_t longest_common = 0;
  for (const FlagSpec& f : kFlags) {
    size_t d = config::edit_distance(name, f.name);
    if (d < best_d) best_d = d, best = std::string(f.name);
    size_t common = 0;
    while (common < name.size() && common < f.name.size() && name[common] == f.name[common])
      ++common;
    if (common > longest_common) longest_common = common, longest = std::string(f.name);
  }
  if (best_d <= std::max<size_t>(3, name.size() / 3)) return best;
  return longest_common >= 6 ? longest : std::string();  // "--" and 4 more characters
}

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
void parse_endpoint(const std::string& value, std::string* host, std::optional<int>* port) {
  std::string h = value;
  std::string p;
  if (!h.empty() && h.front() == '[') {
    size_t close = h.find(']');
    if (close == std::string::npos)
      bad("--rdzv-endpoint '" + value + "' has an unclosed '[' (use [v6addr]:port)");
    std::string rest = h.substr(close + 1);
    h = h.substr(1, close - 1);
    if (!rest.empty()) {
      if (rest.front() != ':') bad("--rdzv-endpoint '" + value + "' is not [v6addr]:port");
      p = rest.substr(1);
    }
  } else {
    size_t colon = h.rfind(':');
    if (colon != std::string::npos && h.find(':') == colon) {
      p = h.substr(colon + 1);
      h = h.substr(0, colon);
    }
  }
  if (h.empty()) bad("--rdzv-endpoint '" + value + "' has no host (use host:port)");
  *host = h;
  if (!p.empty())
    *port = parse_int_flag("--rdzv-endpoint", p, 0, 65535, "host:port with a port in 0..65535");
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

}  // namespace

Options parse_args(int argc, const char* const* argv) {
  Options o;
  std::set<std::string> given;
  std::optional<std::string> rdzv_host;
  std::optional<int> rdzv_port;
  int i = 1;
  for (; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg.front() != '-' || arg == "-") break;  // the program
    if (arg == "-h") {
      o.help = true;
      continue;
    }
    if (arg.size() < 3 || arg.substr(0, 2) != "--")
      bad("unknown option '" + std::string(arg) + "'");
    size_t eq = arg.find('=');
    std::string name = normalize(arg.substr(0, eq));
    const FlagSpec* f = find_flag(name);
    if (f) name = std::string(f->name);
    if (!f) {
      std::string candidates;
      for (const FlagSpec& c : kFlags)
        if (c.name.substr(0, name.size()) == name)
          candidates += (candidates.empty() ? "" : ", ") + std::string(c.name);
      if (!candidates.empty())
        bad("ambiguous option '" + std::string(arg.substr(0, eq)) + "' (" + candidates + ")");
      std::string near = nearest_flag(name);
      bad("unknown option '" + std::string(arg.substr(0, eq)) + "'" +
          (near.empty() ? "" : " (did you mean " + near + "?)"));
    }
    std::string value;
    if (f->takes_value) {
      if (eq != std::string_view::npos) {
        value = std::string(arg.substr(eq + 1));
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        bad(name + " needs a value");
      }
      if (value.empty()) bad(name + " needs a non-empty value");
    } else if (eq != std::string_view::npos) {
      bad(name + " takes no value (got '" + std::string(arg) + "')");
    }
    given.insert(name);

    if (name == "--help") {
      o.help = true;
    } else if (name == "--nproc-per-node") {
      o.nproc_per_node = parse_nproc(value);
    } else if (name == "--nnodes") {
      o.nnodes = parse_nnodes(value);
    } else if (name == "--node-rank") {
      o.node_rank = parse_int_flag(name, value, 0, 1 << 20, "a node rank >= 0");
    } else if (name == "--master-addr") {
      o.master_addr = value;
    } else if (name == "--master-port") {
      o.master_port = parse_int_flag(name, value, 0, 65535, "a port in 0..65535");
    } else if (name == "--standalone") {
      o.standalone = true;
    } else if (name == "--max-restarts") {
      o.max_restarts = parse_int_flag(name, value, 0, 1 << 20, "a count >= 0");
    } else if (name == "--log-dir") {
      o.log_dir = value;
    } else if (name == "--redirects") {
      parse_streams(name, value, &o.redirects, &o.redirects_per_rank);
    } else if (name == "--tee") {
      parse_streams(name, value, &o.tee, &o.tee_per_rank);
    } else if (name == "--rdzv-endpoint") {
      o.rdzv_endpoint = value;
      std::string h;
      parse_endpoint(value, &h, &rdzv_port);
      rdzv_host = h;
    } else if (name == "--rdzv-backend") {
      if (value != "c10d" && value != "static")
        bad("--rdzv-backend '" + value +
            "' is not supported: tprun hosts a TCPStore on node 0 (c10d or static)");
    } else if (name == "--run-id" || name == "--job-id" || name == "--rdzv-id") {
      o.job_id = value;
    } else if (name == "--no-prefix") {
      o.prefix_output = false;
    } else if (name == "--bind-to") {
      if (value != "core" && value != "none")
        bad("--bind-to '" + value + "' is not supported: core (one CPU per local rank) or none");
      o.bind_to_core = value == "core";
    }
  }
  if (i < argc) {
    o.program = argv[i++];
    for (; i < argc; ++i) o.args.emplace_back(argv[i]);
  }
  if (o.help) return o;

  if (o.standalone) {
    if (given.count("--nnodes") && o.nnodes != 1)
      bad("--standalone runs one node, but --nnodes is " + std::to_string(o.nnodes));
    if (given.count("--node-rank") && o.node_rank != 0)
      bad("--standalone runs one node, but --node-rank is " + std::to_string(o.node_rank));
    o.nnodes = 1;
    o.node_rank = 0;
    o.master_addr = "127.0.0.1";
    o.master_port = 0;
  } else {
    if (rdzv_host) {
      if (given.count("--master-addr") && o.master_addr != *rdzv_host)
        bad("--rdzv-endpoint host '" + *rdzv_host + "' disagrees with --master-addr '" +
            o.master_addr + "'; give one of them");
      o.master_addr = *rdzv_host;
      if (rdzv_port) o.master_port = *rdzv_port;
    }
    bool have_nnodes = given.count("--nnodes") > 0;
    bool have_rank = given.count("--node-rank") > 0;
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
    if (o.master_port == 0 && o.nnodes > 1)
      bad("--master-port 0 (a free port) works only on one node; the other nodes must know "
          "the port: give a fixed --master-port");
  }
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
    if (config::is_set("TPCOMM_JOB_ID")) {
      o.job_id = config::get_string("TPCOMM_JOB_ID");
    } else if (config::is_set("SLURM_JOB_ID")) {
      o.job_id = "slurm-" + config::get_string("SLURM_JOB_ID");
    }
  }
  o.grace = config::get_duration("TPCOMM_LAUNCH_GRACE");
  return o;
}

std::string usage(std::string_view prog) {
  std::string p(prog);
  return "usage: " + p + R"( [options] PROGRAM [ARGS...]
       )" +
         p + R"( [options] -- PROGRAM [ARGS...]

Starts nproc-per-node copies of PROGRAM on this node with RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT and TPCOMM_JOB_ID set. Node 0 hosts
the job's TCPStore on the master port; workers reach it through env://. When a worker fails,
the others on this node are stopped and tprun exits with the failing worker's status.

options (underscores work too: --nproc_per_node):
  --nproc-per-node N     workers on this node (default 1; 'cpu': one per CPU)
  --nnodes N             nodes in the job (default 1, or from Slurm/mpirun)
  --node-rank R          this node's index, 0..nnodes-1 (default 0, or from Slurm/mpirun)
  --master-addr A        address of node 0 (default 127.0.0.1)
  --master-port P        port of the store on node 0 (default 29500; 0: a free port,
                         single node only)
  --standalone           single node on 127.0.0.1 with a free port
  --rdzv-endpoint H:P    same as --master-addr H --master-port P
  --run-id ID            job id given to workers as TPCOMM_JOB_ID (also --job-id,
                         --rdzv-id; default: TPCOMM_JOB_ID, SLURM_JOB_ID, else random)
  --max-restarts N       restart all workers of this node up to N times after a failure
  --log-dir DIR          also write each worker's output to DIR/rank_N/{stdout,stderr}.log
  --redirects S          send stream(s) S only to the log files: 0 none, 1 stdout,
                         2 stderr, 3 both, or per local rank: 0:3,1:2
  --tee S                write stream(s) S to console and files (the default with --log-dir)
  --no-prefix            do not put "[rank N]: " before each line of worker output
  --bind-to core|none    core: pin local rank i to the i-th CPU tprun may use (as mpirun
                         binds); none: let the scheduler place workers (default)
  -h, --help             show this help

environment: TPCOMM_LAUNCH_GRACE (SIGTERM to SIGKILL grace, default 5s).
exit status: 0, the failing worker's exit code, or 128+signal; 2 for a bad command line.
)";
}

}  // namespace tpcomm::launch
