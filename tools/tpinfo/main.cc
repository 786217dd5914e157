// tpinfo: what tpcomm sees on this machine (or on a stored one): version and build, the
// transports built and usable here and why not, the topology as a compact tree, the GPU x NIC
// relations with the GPUDirect decision and its reason, the NIC each buffer location would
// use, and every TPCOMM_* variable with its value, default and meaning.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/config.h"
#include "graph.h"
#include "pg/link_report.h"
#include "report.h"
#include "tpcomm/error.hpp"
#include "trace.h"

namespace {

constexpr const char* kUsage =
    "usage: tpinfo [--topo FILE] [--json | --graph OUT.svg|OUT.dot]\n"
    "              [--links [--timeout SEC] [--bytes N]] [--trace DIR]\n"
    "  (no option)   report on this machine (TPCOMM_TOPO_FILE replaces the discovery)\n"
    "  --topo FILE   report on a stored machine: an hwloc XML export (v1 or v2) or a tpcomm\n"
    "                JSON dump (TPCOMM_TOPO_DUMP_FILE); nothing is bound\n"
    "  --json        the same report as one JSON document\n"
    "  --graph OUT   draw the topology tree (packages, NUMA nodes, PCIe bridges, GPUs, NICs)\n"
    "                with the NIC chosen for each GPU (GPUDirect or staged, and why) with\n"
    "                Graphviz: OUT.svg (runs dot) or OUT.dot\n"
    "  --vars-markdown  every TPCOMM_* variable as a markdown table (for the README)\n"
    "  --links       rank x rank matrix of the transport chosen for each link and why, with a\n"
    "                preflight of every link (8 B and --bytes, default 1 MiB, each way within\n"
    "                --timeout seconds, default 30); run under tprun, e.g.\n"
    "                tprun --nproc-per-node 4 tpinfo --links. Exit status 1 when a link fails.\n"
    "  --trace DIR   merge the flight recorder dumps of all ranks in DIR (written on a\n"
    "                timeout, a lost peer, a mismatch or SIGUSR1 to TPCOMM_FLIGHT_RECORDER_DIR)\n"
    "                and say which rank is behind or which call the ranks disagree on.\n"
    "                Exit status 1 when a dump cannot be read.\n";

int usage_error(const std::string& what) {
  std::fprintf(stderr, "tpinfo: %s\n%s", what.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string topo_file;
  bool json = false;
  std::string graph;
  bool links = false;
  tpcomm::tpinfo::LinksOptions link_options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--topo" || a.rfind("--topo=", 0) == 0) {
      if (a == "--topo") {
        if (i + 1 >= argc) return usage_error("--topo needs a file name");
        topo_file = argv[++i];
      } else {
        topo_file = a.substr(7);
      }
      if (topo_file.empty()) return usage_error("--topo needs a file name");
    } else if (a == "--json") {
      json = true;
    } else if (a == "--graph") {
      if (i + 1 >= argc || argv[i + 1][0] == '\0') return usage_error("--graph needs a file name");
      graph = argv[++i];
    } else if (a == "--vars-markdown") {
      // The README's table of variables, generated from the registry.
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
    } else if (a == "--trace") {
      if (i + 1 >= argc) return usage_error("--trace needs a directory");
      std::string out, err;
      int rc = tpcomm::tpinfo::trace_report(argv[++i], out, err);
      std::fwrite(out.data(), 1, out.size(), stdout);
      std::fwrite(err.data(), 1, err.size(), stderr);
      return rc;
    } else if (a == "--links") {
      links = true;
    } else if (a == "--timeout" || a == "--bytes") {
      if (i + 1 >= argc) return usage_error(a + " needs a value");
      std::string v = argv[++i];
      char* end = nullptr;
      double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(x > 0) || x > 1e12)
        return usage_error(a + " needs a positive number, got '" + v + "'");
      if (a == "--timeout")
        link_options.timeout = std::chrono::milliseconds(static_cast<int64_t>(x * 1000));
      else
        link_options.bytes = static_cast<size_t>(x);
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      return usage_error("unknown argument '" + a + "'");
    }
  }
  if (links) {
    try {
      return tpcomm::tpinfo::run_links(link_options);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tpinfo --links: %s\n", e.what());
      return 1;
    }
  }
  try {
    for (const std::string& w : tpcomm::config::validate())
      std::fprintf(stderr, "tpinfo: warning: %s\n", w.c_str());
    tpcomm::tpinfo::Inputs in;
    in.stored = !topo_file.empty();
    in.topology = in.stored ? tpcomm::topo::load_file(topo_file) : tpcomm::topo::load_configured();
    in.transports = tpcomm::topo::probe_transports();
    in.nic_options = tpcomm::topo::NicOptions::from_config();
    if (!graph.empty()) {
      tpcomm::tpinfo::write_graph(tpcomm::tpinfo::topology_dot(in.topology, in.nic_options), graph);
      std::printf("tpinfo: wrote %s\n", graph.c_str());
      return 0;
    }
    std::string out = json ? tpcomm::tpinfo::json_report(in) : tpcomm::tpinfo::text_report(in);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  } catch (const tpcomm::Error& e) {
    std::fprintf(stderr, "tpinfo: %s\n", e.what());
    return 1;
  }
}
