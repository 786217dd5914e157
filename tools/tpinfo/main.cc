// tpinfo: what tpcomm sees on this machine (or on a stored one): version and build, the
// transports built and usable here and why not, the topology as a compact tree, the GPU x NIC
// relations with the GPUDirect decision and its reason, the NIC each buffer location would
// use, and every TPCOMM_* variable with its value, default and meaning.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "core/cli.h"
#include "core/config.h"
#include "graph.h"
#include "pg/link_report.h"
#include "report.h"
#include "tpcomm/error.hpp"
#include "trace.h"

namespace {

constexpr const char* kTool = "tpinfo";

// The command line, one field per option.
struct Args {
  std::string topo_file;
  bool json = false;
  std::string graph;
  bool vars_markdown = false;
  bool links = false;
  double timeout_s = 30;
  double bytes = 1 << 20;
  std::string trace_dir;
};

// A number above 0 (CLI11's PositiveNumber prints the range of a double).
const CLI::Validator kPositive(
    [](std::string& v) -> std::string {
      char* end = nullptr;
      double x = std::strtod(v.c_str(), &end);
      return end != v.c_str() && *end == '\0' && x > 0 && x <= 1e12
                 ? ""
                 : "'" + v + "' is not a positive number";
    },
    "");

void add_options(CLI::App& app, Args& a) {
  app.add_option("--topo", a.topo_file,
                 "report on a stored machine: an hwloc XML export (v1 or v2) or a tpcomm JSON "
                 "dump (TPCOMM_TOPO_DUMP_FILE); nothing is bound")
      ->type_name("FILE");
  app.add_flag("--json", a.json, "the same report as one JSON document");
  app.add_option("--graph", a.graph,
                 "draw the topology tree (packages, NUMA nodes, PCIe bridges, GPUs, NICs) with "
                 "the NIC chosen for each GPU (GPUDirect or staged, and why) with Graphviz: "
                 "OUT.svg (runs dot) or OUT.dot")
      ->type_name("OUT");
  app.add_flag("--vars-markdown", a.vars_markdown,
               "every TPCOMM_* variable as a markdown table (for the README)");
  app.add_flag("--links", a.links,
               "rank x rank matrix of the transport chosen for each link and why, with a "
               "preflight of every link (8 B and --bytes each way within --timeout); run under "
               "tprun, e.g. tprun --nproc-per-node 4 tpinfo --links. Exit status 1 when a link "
               "fails");
  app.add_option("--timeout", a.timeout_s, "--links: seconds for the preflight (default 30)")
      ->type_name("SEC")
      ->check(kPositive);
  app.add_option("--bytes", a.bytes,
                 "--links: bytes of the large preflight message (default 1 MiB)")
      ->type_name("N")
      ->check(kPositive);
  app.add_option("--trace", a.trace_dir,
                 "merge the flight recorder dumps of all ranks in DIR (written on a timeout, a "
                 "lost peer, a mismatch or SIGUSR1 to TPCOMM_FLIGHT_RECORDER_DIR) and say which "
                 "rank is behind or which call the ranks disagree on. Exit status 1 when a dump "
                 "cannot be read")
      ->type_name("DIR");
}

int vars_markdown() {
  std::fputs("| variable | type | default | meaning |\n| --- | --- | --- | --- |\n", stdout);
  for (const tpcomm::config::Param* p : tpcomm::config::all()) {
    if (p->external) continue;
    std::string allowed(p->allowed);
    std::string type = tpcomm::config::type_name(p->type);
    if (!allowed.empty() && allowed.size() < 60) type += " (" + allowed + ")";
    for (size_t k = 0; (k = type.find('|', k)) != std::string::npos; k += 2)
      type.replace(k, 1, "\\|");
    std::printf("| `%.*s` | %s | `%.*s` | %.*s |\n", static_cast<int>(p->name.size()),
                p->name.data(), type.c_str(), static_cast<int>(p->default_value.size()),
                p->default_value.data(), static_cast<int>(p->description.size()),
                p->description.data());
  }
  return 0;
}

int report(const Args& a) {
  for (const std::string& w : tpcomm::config::validate())
    std::fprintf(stderr, "tpinfo: warning: %s\n", w.c_str());
  tpcomm::tpinfo::Inputs in;
  in.stored = !a.topo_file.empty();
  in.topology = in.stored ? tpcomm::topo::load_file(a.topo_file) : tpcomm::topo::load_configured();
  in.transports = tpcomm::topo::probe_transports();
  in.nic_options = tpcomm::topo::NicOptions::from_config();
  in.cuda = tpcomm::cuda::driver_status();
  if (!a.graph.empty()) {
    tpcomm::tpinfo::write_graph(tpcomm::tpinfo::topology_dot(in.topology, in.nic_options), a.graph);
    std::printf("tpinfo: wrote %s\n", a.graph.c_str());
    return 0;
  }
  std::string out = a.json ? tpcomm::tpinfo::json_report(in) : tpcomm::tpinfo::text_report(in);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int run(int argc, char** argv) {
  Args a;
  CLI::App app;
  tpcomm::cli::setup(app, kTool);
  app.description(
      "usage: tpinfo [--topo FILE] [--json | --graph OUT.svg|OUT.dot]\n"
      "              [--links [--timeout SEC] [--bytes N]] [--trace DIR]\n\n"
      "Without options: a report on this machine (TPCOMM_TOPO_FILE replaces the discovery).");
  add_options(app, a);
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
  if (a.vars_markdown) return vars_markdown();
  if (!a.trace_dir.empty()) {
    std::string out, err;
    int rc = tpcomm::tpinfo::trace_report(a.trace_dir, out, err);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fwrite(err.data(), 1, err.size(), stderr);
    return rc;
  }
  if (a.links) {
    tpcomm::tpinfo::LinksOptions lo;
    lo.timeout = std::chrono::milliseconds(static_cast<int64_t>(a.timeout_s * 1000));
    lo.bytes = static_cast<size_t>(a.bytes);
    return tpcomm::tpinfo::run_links(lo);
  }
  return report(a);
}

}  // namespace

int main(int argc, char** argv) {
  return tpcomm::cli::guarded(kTool, std::cerr, [&] { return run(argc, argv); });
}
