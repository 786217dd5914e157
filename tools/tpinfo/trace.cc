// tpinfo --trace: reading and merging flight recorder dumps.
#include "trace.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

namespace tpcomm::tpinfo {
namespace {

struct Call {
  uint64_t seq = 0;
  std::string op, dtype, state, algo, redop;
  int64_t count = -1;
  int root = -1;
  uint64_t start_ns = 0, end_ns = 0;
};

struct GroupDump {
  std::string id, name;
  int group_rank = -1;
  std::vector<int> ranks;
  std::map<uint64_t, Call> calls;  // by sequence number
};

struct Dump {
  std::string file;
  int rank = -1;
  std::string host, reason, pid;
  std::vector<GroupDump> groups;
};

// Thrown for a malformed file.
struct BadFile {
  std::string what;
};

bool to_u64(const std::string& s, uint64_t& v) {
  if (s.empty() || s.size() > 20) return false;
  v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return true;
}

bool to_i64(const std::string& s, int64_t& v) {
  uint64_t u = 0;
  if (!s.empty() && s[0] == '-') {
    if (!to_u64(s.substr(1), u)) return false;
    v = -static_cast<int64_t>(u);
    return true;
  }
  if (!to_u64(s, u)) return false;
  v = static_cast<int64_t>(u);
  return true;
}

// "key=value key=value" after the first word.
std::map<std::string, std::string> fields(const std::string& line) {
  std::map<std::string, std::string> f;
  std::istringstream is(line);
  std::string tok;
  is >> tok;  // the line's kind
  while (is >> tok) {
    size_t eq = tok.find('=');
    if (eq == std::string::npos) throw BadFile{"'" + tok + "' is not key=value"};
    f[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return f;
}

Dump parse(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BadFile{"cannot be opened"};
  Dump d;
  d.file = path;
  std::string line;
  int no = 0;
  bool ended = false;
  auto fail = [&](const std::string& what) {
    throw BadFile{"line " + std::to_string(no) + ": " + what};
  };
  while (std::getline(in, line)) {
    ++no;
    if (no == 1) {
      if (line.rfind("tpcomm-flight-recorder ", 0) != 0)
        throw BadFile{
            "not a tpcomm flight recorder dump (its first line is not "
            "'tpcomm-flight-recorder v1')"};
      if (line != "tpcomm-flight-recorder v1")
        throw BadFile{"unsupported format '" + line.substr(23, 20) +
                      "' (this tpinfo reads v1); use the tpinfo of the tpcomm that wrote it"};
      continue;
    }
    if (ended) fail("text after the final 'end' line");
    if (line == "end") {
      ended = true;
      continue;
    }
    size_t sp = line.find(' ');
    std::string kind = line.substr(0, sp);
    std::string rest = sp == std::string::npos ? "" : line.substr(sp + 1);
    try {
      if (kind == "rank") {
        int64_t r = 0;
        if (!to_i64(rest, r) || r < 0 || r > (1 << 24)) fail("bad rank '" + rest + "'");
        d.rank = static_cast<int>(r);
      } else if (kind == "host") {
        d.host = rest;
      } else if (kind == "pid") {
        d.pid = rest;
      } else if (kind == "reason") {
        d.reason = rest;
      } else if (kind == "group") {
        auto f = fields(line);
        GroupDump g;
        g.id = f["id"];
        g.name = f["name"];
        int64_t gr = -1;
        to_i64(f["group_rank"], gr);
        g.group_rank = static_cast<int>(gr);
        std::istringstream rs(f["ranks"]);
        std::string r;
        while (std::getline(rs, r, ',')) {
          int64_t v = 0;
          if (!to_i64(r, v)) fail("bad ranks '" + f["ranks"] + "'");
          g.ranks.push_back(static_cast<int>(v));
        }
        if (g.id.empty() || g.ranks.empty()) fail("a group line needs id= and ranks=");
        d.groups.push_back(std::move(g));
      } else if (kind == "op") {
        if (d.groups.empty()) fail("an op line before any group line");
        auto f = fields(line);
        Call c;
        if (!to_u64(f["seq"], c.seq)) fail("bad or missing seq");
        c.op = f["op"];
        c.state = f["state"];
        if (c.op.empty() || c.state.empty()) fail("an op line needs op= and state=");
        c.dtype = f["dtype"];
        c.algo = f["algo"];
        c.redop = f["redop"];
        if (f.count("count") && !to_i64(f["count"], c.count)) fail("bad count");
        int64_t root = -1;
        if (f.count("root") && !to_i64(f["root"], root)) fail("bad root");
        c.root = static_cast<int>(root);
        if (f.count("start_ns")) to_u64(f["start_ns"], c.start_ns);
        if (f.count("end_ns")) to_u64(f["end_ns"], c.end_ns);
        d.groups.back().calls[c.seq] = c;
      }
      // Other header lines (world_size, hostname, job, time_ns) are informational.
    } catch (const BadFile& e) {
      if (e.what.rfind("line ", 0) == 0) throw;
      fail(e.what);
    }
  }
  if (no == 0) throw BadFile{"is empty"};
  if (!ended)
    throw BadFile{"is truncated after line " + std::to_string(no) +
                  " (no final 'end' line): the rank may have died while writing it"};
  if (d.rank < 0) throw BadFile{"has no 'rank' line"};
  return d;
}

std::string signature(const Call& c) {
  std::string s = c.op;
  std::string args;
  if (!c.dtype.empty()) args = c.dtype + "[" + std::to_string(c.count) + "]";
  if (c.root >= 0)
    args += (args.empty() ? "" : ", ") + std::string("root ") + std::to_string(c.root);
  if (!c.redop.empty()) args += (args.empty() ? "" : ", ") + c.redop;
  return args.empty() ? s : s + "(" + args + ")";
}

std::string rank_list(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

std::string pad(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

// The merged view of one group: each member's dump of it (null: none).
struct Merged {
  std::string id, name;
  std::vector<int> ranks;
  std::map<int, std::pair<const Dump*, const GroupDump*>> by_rank;
};

std::string conclude(const Merged& m) {
  // 1. A call the ranks disagree on (the first one).
  std::set<uint64_t> seqs;
  for (auto& [r, dg] : m.by_rank)
    for (auto& [s, c] : dg.second->calls) seqs.insert(s);
  for (uint64_t s : seqs) {
    std::map<std::string, std::vector<int>> sigs;
    for (auto& [r, dg] : m.by_rank) {
      auto it = dg.second->calls.find(s);
      if (it != dg.second->calls.end()) sigs[signature(it->second)].push_back(r);
    }
    if (sigs.size() < 2) continue;
    std::string out = "call #" + std::to_string(s) + " disagrees:";
    bool first = true;
    for (auto& [sig, ranks] : sigs) {
      out += std::string(first ? " " : " vs ") + (ranks.size() > 1 ? "ranks " : "rank ") +
             rank_list(ranks) + " " + sig;
      first = false;
    }
    return out;
  }
  // 2. A rank behind the others.
  uint64_t top = 0;
  bool any = false;
  std::map<int, std::pair<bool, uint64_t>> at;  // rank -> (has calls, highest seq)
  for (auto& [r, dg] : m.by_rank) {
    auto& calls = dg.second->calls;
    if (calls.empty()) {
      at[r] = {false, 0};
      continue;
    }
    uint64_t hi = calls.rbegin()->first;
    at[r] = {true, hi};
    if (!any || hi > top) top = hi;
    any = true;
  }
  std::vector<int> missing;
  for (int r : m.ranks)
    if (!m.by_rank.count(r)) missing.push_back(r);
  std::vector<int> behind;
  for (auto& [r, a] : at)
    if (any && (!a.first || a.second < top)) behind.push_back(r);
  std::string others_at;
  if (any) {
    for (auto& [r, dg] : m.by_rank) {
      auto it = dg.second->calls.find(top);
      if (it != dg.second->calls.end()) {
        others_at = it->second.op + " #" + std::to_string(top);
        break;
      }
    }
  }
  if (!behind.empty()) {
    std::string out;
    for (int r : behind) {
      const GroupDump& g = *m.by_rank.at(r).second;
      std::string last = "none";
      std::string flight;
      for (auto it = g.calls.rbegin(); it != g.calls.rend(); ++it) {
        if (it->second.state == "completed") {
          last = it->second.op + " #" + std::to_string(it->first);
          break;
        }
        if (flight.empty())
          flight = it->second.op + " #" + std::to_string(it->first) + " " + it->second.state;
      }
      out += std::string(out.empty() ? "" : "; ") + "rank " + std::to_string(r) +
             " is behind: last completed " + last + (flight.empty() ? "" : " (" + flight + ")");
    }
    return out + " while the others are at " + others_at;
  }
  if (!missing.empty())
    return std::string(missing.size() > 1 ? "ranks " : "rank ") + rank_list(missing) +
           " left no dump here (" + (missing.size() > 1 ? "they" : "it") +
           " may be behind, stuck outside tpcomm, or dead; send SIGUSR1 to dump a live rank)" +
           (any ? "; the others are at " + others_at : "");
  return "all ranks agree" + (any ? " (last call " + others_at + ")" : std::string());
}

}  // namespace

int trace_report(const std::string& dir, std::string& out, std::string& err) {
  DIR* d = opendir(dir.c_str());
  if (!d) {
    err += "tpinfo --trace: cannot open the directory '" + dir +
           "': flight recorder dumps are written to TPCOMM_FLIGHT_RECORDER_DIR (default "
           "/tmp/tpcomm_trace_<job id>)\n";
    return 1;
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 6 && n.compare(n.size() - 6, 6, ".trace") == 0) names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  int status = 0;
  std::vector<Dump> dumps;
  for (const std::string& n : names) {
    std::string path = dir + "/" + n;
    try {
      dumps.push_back(parse(path));
    } catch (const BadFile& e) {
      err += "tpinfo --trace: " + path + ": " + e.what + "; skipped\n";
      status = 1;
    }
  }
  if (dumps.empty()) {
    err += "tpinfo --trace: no readable flight recorder dump (*.trace) in '" + dir + "'\n";
    return 1;
  }
  std::map<std::string, Merged> groups;  // by id
  std::vector<std::string> order;
  for (const Dump& dp : dumps)
    for (const GroupDump& g : dp.groups) {
      if (!groups.count(g.id)) order.push_back(g.id);
      Merged& m = groups[g.id];
      m.id = g.id;
      m.name = g.name;
      if (m.ranks.empty()) m.ranks = g.ranks;
      m.by_rank[dp.rank] = {&dp, &g};
    }
  out += std::to_string(dumps.size()) + " dump(s) in " + dir + "\n";
  for (const std::string& id : order) {
    const Merged& m = groups[id];
    out += "\ngroup " + m.name + " (id " + m.id + ", ranks " + rank_list(m.ranks) + ")\n";
    out += "  " + pad("rank", 6) + pad("host", 18) + pad("last completed", 28) +
           pad("in flight / failed", 34) + "dump reason\n";
    for (int r : m.ranks) {
      auto it = m.by_rank.find(r);
      if (it == m.by_rank.end()) {
        out += "  " + pad(std::to_string(r), 6) + "(no dump)\n";
        continue;
      }
      const Dump& dp = *it->second.first;
      const GroupDump& g = *it->second.second;
      std::string last = "-", flight = "-";
      for (auto c = g.calls.rbegin(); c != g.calls.rend(); ++c) {
        if (c->second.state == "completed") {
          last = signature(c->second) + " #" + std::to_string(c->first);
          break;
        }
        if (flight == "-")
          flight = signature(c->second) + " #" + std::to_string(c->first) + " " + c->second.state;
      }
      std::string reason = dp.reason.size() > 60 ? dp.reason.substr(0, 57) + "..." : dp.reason;
      out += "  " + pad(std::to_string(r), 6) + pad(dp.host.substr(0, 17), 18) + pad(last, 28) +
             pad(flight, 34) + reason + "\n";
    }
    out += "conclusion (group " + m.name + "): " + conclude(m) + "\n";
  }
  return status;
}

}  // namespace tpcomm::tpinfo
