// tpinfo --graph (graph.h).
#include "graph.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "tpcomm/error.hpp"

extern char** environ;

namespace tpcomm::tpinfo {

namespace {

// A DOT quoted string: quotes and backslashes escaped, "\n" kept as DOT's centred line break.
std::string q(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// Left-justified lines for a note (DOT's "\l" ends a line flush left), wrapped at spaces so
// that no line runs past `width` characters.
std::string left(const std::vector<std::string>& lines, size_t width = 100) {
  std::string out = "\"";
  for (std::string l : lines) {
    while (!l.empty()) {
      size_t cut = l.size();
      if (cut > width) {
        size_t sp = l.rfind(' ', width);
        cut = sp == std::string::npos || sp == 0 ? width : sp;
      }
      for (char c : l.substr(0, cut)) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
      }
      out += "\\l";
      l = cut < l.size() ? l.substr(l[cut] == ' ' ? cut + 1 : cut) : "";
    }
  }
  return out + "\"";
}

std::string short_bus(const std::string& id) {
  return id.rfind("0000:", 0) == 0 ? id.substr(5) : id;
}

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f GiB", static_cast<double>(bytes) / (1u << 30));
  return buf;
}

class Dot {
 public:
  explicit Dot(const topo::Topology& t) : t_(t) {}

  void node(const std::string& id, const std::string& label, const std::string& attrs) {
    if (nodes_.insert(id).second) os_ << "  " << q(id) << " [label=" << q(label) << attrs << "];\n";
  }
  void edge(const std::string& a, const std::string& b, const std::string& attrs = "") {
    if (edges_.insert(a + "\n" + b).second)
      os_ << "  " << q(a) << " -> " << q(b) << (attrs.empty() ? "" : " [" + attrs + "]") << ";\n";
  }
  std::ostringstream& out() { return os_; }

  // Where a device's PCI tree hangs: its NUMA node, else its package, else the machine.
  std::string attach_point(const topo::PciDevice& d) {
    if (d.numa >= 0 && t_.find_numa(d.numa)) return "numa" + std::to_string(d.numa);
    if (d.package >= 0) {
      for (const topo::Package& p : t_.packages)
        if (p.os_index == d.package) return "package" + std::to_string(d.package);
    }
    return "machine";
  }

  // The device's bridges from the host bridge down, as nodes and edges; returns its parent.
  std::string pci_path(const topo::PciDevice& d) {
    std::string parent = attach_point(d);
    for (const std::string& p : d.path) {
      bool host_bridge = p.find('[') != std::string::npos;
      std::string id = "pci:" + p;
      node(id, (host_bridge ? "host bridge\n" : "PCIe bridge\n") + short_bus(p),
           host_bridge ? ", shape=trapezium, style=filled, fillcolor=gray90"
                       : ", shape=invtrapezium, fontsize=10");
      edge(parent, id);
      parent = id;
    }
    return parent;
  }

 private:
  const topo::Topology& t_;
  std::ostringstream os_;
  std::set<std::string> nodes_, edges_;
};

std::string nic_label(const topo::Nic& n) {
  std::string ports;
  for (const topo::NicPort& p : n.ports)
    ports += (ports.empty() ? "" : ", ") + std::string("port ") + std::to_string(p.number) +
             (p.state == 4   ? " active"
              : p.state == 0 ? ""
                             : " down");
  return n.name + " (" + n.kind + ")\n" + short_bus(n.pci.busid) + (ports.empty() ? "" : "\n") +
         ports;
}

}  // namespace

std::string topology_dot(const topo::Topology& t, const topo::NicOptions& o) {
  Dot d(t);
  std::ostream& os = d.out();
  std::string title = (t.hostname.empty() ? std::string("machine") : t.hostname) +
                      (t.cpu_model.empty() ? "" : "\n" + t.cpu_model);
  os << "digraph topology {\n"
     << "  graph [rankdir=TB, fontname=\"Helvetica\", label="
     << q(title +
          "\nGPU -> NIC: the NIC chosen for each GPU's buffers under TPCOMM_NET_GDR_LEVEL=" +
          topo::relation_name(o.gdr_level))
     << ", labelloc=t];\n"
     << "  node [fontname=\"Helvetica\", fontsize=11, shape=box];\n"
     << "  edge [fontname=\"Helvetica\", arrowhead=none, color=gray40];\n";
  d.node("machine",
         "machine\n" + std::to_string(t.cores) + " cores, " + std::to_string(t.pus) + " PUs",
         ", shape=box3d");
  for (const topo::Package& p : t.packages) {
    std::string id = "package" + std::to_string(p.os_index);
    d.node(id, "Package " + std::to_string(p.os_index) + "\nCPUs " + p.cpuset,
           ", style=filled, fillcolor=lightyellow");
    d.edge("machine", id);
  }
  for (const topo::NumaNode& n : t.numa_nodes) {
    std::string id = "numa" + std::to_string(n.os_index);
    d.node(id,
           "NUMA " + std::to_string(n.os_index) + "\nCPUs " + n.cpuset +
               (n.memory_bytes ? "\n" + gib(n.memory_bytes) : ""),
           ", style=\"filled,rounded\", fillcolor=khaki");
    bool has_package = false;
    for (const topo::Package& p : t.packages) has_package |= p.os_index == n.package;
    d.edge(has_package ? "package" + std::to_string(n.package) : "machine", id);
  }
  for (const topo::Gpu& g : t.gpus) {
    std::string parent = d.pci_path(g.pci);
    std::string id = "gpu:" + g.pci.busid + ":" + g.label();
    d.node(
        id,
        g.label() + "\n" + (g.model.empty() ? g.vendor : g.model) + "\n" + short_bus(g.pci.busid),
        ", style=filled, fillcolor=palegreen");
    d.edge(parent, id);
  }
  for (const topo::Nic& n : t.nics) {
    std::string parent = d.pci_path(n.pci);
    std::string id = "nic:" + n.name;
    d.node(
        id, nic_label(n),
        std::string(", style=filled, fillcolor=") + (n.any_port_active() ? "lightblue" : "gray80"));
    d.edge(parent, id);
  }
  // The pairings: one bold edge per GPU that has a NIC, and a note with every reason.
  std::vector<std::string> notes = {o.hca_text.empty()
                                        ? std::string("NIC choice")
                                        : "NIC choice (TPCOMM_IB_HCA='" + o.hca_text + "')"};
  for (const topo::Gpu& g : t.gpus) {
    topo::NicPick p = topo::pick_nic_for_gpu(t, g, o);
    notes.push_back(p.why);
    if (p.nic.empty()) continue;
    notes.push_back("GPUDirect " + std::string(p.gdr ? "yes: " : "no, staged: ") + p.gdr_why);
    std::string mode = p.gdr ? "GPUDirect" : "staged";
    d.edge("gpu:" + g.pci.busid + ":" + g.label(), "nic:" + p.nic,
           "constraint=false, style=bold, penwidth=2.5, arrowhead=normal, color=" +
               std::string(p.gdr ? "forestgreen" : "darkorange") +
               ", fontcolor=" + (p.gdr ? "forestgreen" : "darkorange") +
               ", fontsize=10, label=" + q(mode + " " + topo::relation_name(p.relation)) +
               ", tooltip=" + q(p.why + "; GPUDirect " + (p.gdr ? "yes: " : "no: ") + p.gdr_why));
  }
  for (const topo::NumaNode& n : t.numa_nodes)
    notes.push_back(topo::pick_nic_for_numa(t, n.os_index, 0, o).why);
  os << "  \"why\" [shape=note, fontsize=10, label=" << left(notes) << "];\n";
  os << "}\n";
  return d.out().str();
}

void write_graph(const std::string& dot, const std::string& path) {
  auto ends_with = [&](const char* ext) {
    size_t n = std::strlen(ext);
    return path.size() > n && path.compare(path.size() - n, n, ext) == 0;
  };
  if (ends_with(".dot")) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << dot;
    f.close();
    if (!f) throw Error("cannot write '" + path + "': " + std::strerror(errno));
    return;
  }
  if (!ends_with(".svg"))
    throw InvalidArgument("--graph '" + path + "': name the picture *.svg or *.dot");
  int in[2];
  if (pipe(in) != 0) throw Error(std::string("pipe failed: ") + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_addclose(&fa, in[1]);
  std::string out = "-o" + path;
  const char* argv[] = {"dot", "-Tsvg", out.c_str(), nullptr};
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, "dot", &fa, nullptr, const_cast<char**>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  if (rc != 0) {
    close(in[1]);
    throw Error("cannot run Graphviz's dot (" + std::string(std::strerror(rc)) +
                "): install graphviz, or write the graph as .dot");
  }
  // A dot that exits early must not kill tpinfo with SIGPIPE: its status says what failed.
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old);
  size_t off = 0;
  while (off < dot.size()) {
    ssize_t w = write(in[1], dot.data() + off, dot.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
  close(in[1]);
  sigaction(SIGPIPE, &old, nullptr);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (off < dot.size() || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    throw Error("Graphviz's dot failed to write '" + path + "' (status " + std::to_string(st) +
                ")");
}

}  // namespace tpcomm::tpinfo
