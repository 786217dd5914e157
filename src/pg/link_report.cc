// tpinfo --links: link choice and preflight of every pair of ranks (see link_report.h).
#include "pg/link_report.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "pg/group_state.h"
#include "tpcomm/error.hpp"
#include "tpcomm/process_group.hpp"

namespace tpcomm::tpinfo {

namespace {

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\t' || c == '\r') c = ' ';
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t k = s.find(sep, start);
    out.push_back(s.substr(start, k == std::string::npos ? std::string::npos : k - start));
    if (k == std::string::npos) return out;
    start = k + 1;
  }
}

uint8_t pattern(int from, int to, size_t i) {
  return static_cast<uint8_t>(from * 31 + to * 7 + i * 13 + (i >> 8));
}

std::string human_bytes(size_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

}  // namespace

std::string encode_rows(const std::vector<LinkRow>& rows) {
  std::ostringstream os;
  for (const LinkRow& r : rows) {
    os << r.from << '\t' << r.to << '\t' << one_line(r.transport) << '\t' << (r.ok ? 1 : 0)
       << '\t' << r.ms << '\t' << one_line(r.reason) << '\t' << one_line(r.error) << '\n';
  }
  return os.str();
}

std::vector<LinkRow> decode_rows(const std::string& text, const std::string& what) {
  std::vector<LinkRow> rows;
  std::istringstream is(text);
  std::string line;
  int n = 0;
  while (std::getline(is, line)) {
    ++n;
    std::vector<std::string> f = split(line, '\t');
    if (f.size() != 7)
      throw InvalidArgument(what + ": line " + std::to_string(n) + " has " +
                            std::to_string(f.size()) + " fields, expected 7");
    LinkRow r;
    try {
      r.from = std::stoi(f[0]);
      r.to = std::stoi(f[1]);
      r.ok = f[3] == "1";
      r.ms = std::stod(f[4]);
    } catch (const std::exception&) {
      throw InvalidArgument(what + ": line " + std::to_string(n) + " has a malformed number");
    }
    r.transport = f[2];
    r.reason = f[5];
    r.error = f[6];
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string link_advice(const std::string& transport, const std::string& error) {
  if (transport.empty())
    return "no transport reaches the peer: check TPCOMM_TRANSPORT / TPCOMM_SHM_DISABLE and the "
           "backend, and that both ranks built and can use a common transport (tpinfo on each "
           "host lists what is usable and why not)";
  if (transport == "shm")
    return "shared memory: check the free space in /dev/shm (containers: docker run "
           "--shm-size=8g, or mount a larger tmpfs), and that both ranks really share a host "
           "(TPCOMM_HOSTID); TPCOMM_SHM_DISABLE=1 falls back to the network transports";
  if (transport == "tcp") {
    std::string a = "TCP: the peer's published address must be reachable from here: check the "
                    "interface (TPCOMM_SOCKET_IFNAME, TPCOMM_SOCKET_ADDR), routes, and that no "
                    "firewall blocks the peer's listening port";
    if (error.find("refused") != std::string::npos) a += " (connection refused: port blocked?)";
    if (error.find("unreachable") != std::string::npos)
      a += " (network unreachable: wrong interface?)";
    return a;
  }
  if (transport == "ucx")
    return "UCX: check UCX_TLS / TPCOMM_UCX_TLS and UCX_NET_DEVICES; `ucx_info -d` lists the "
           "devices and transports UCX sees on each host";
  if (transport == "ibverbs")
    return "ibverbs: check that the port is ACTIVE (ibv_devinfo), the device filter "
           "TPCOMM_IB_HCA, and for RoCE the GID index (TPCOMM_IB_GID_INDEX), MTU and PFC";
  return "";
}

std::string format_links(int world_size, const std::vector<LinkRow>& rows, size_t bytes) {
  std::map<std::pair<int, int>, const LinkRow*> at;
  for (const LinkRow& r : rows) at[{r.from, r.to}] = &r;
  std::ostringstream os;
  os << "Links: transport chosen by each rank (row) for each peer (column)\n";
  size_t w = 5;
  for (const LinkRow& r : rows) w = std::max(w, r.transport.size() + (r.ok ? 1 : 2));
  auto pad = [&](const std::string& s) {
    return s + std::string(s.size() < w ? w - s.size() : 1, ' ');
  };
  os << "  " << pad("rank");
  for (int c = 0; c < world_size; ++c) os << pad(std::to_string(c));
  os << "\n";
  for (int r = 0; r < world_size; ++r) {
    os << "  " << pad(std::to_string(r));
    for (int c = 0; c < world_size; ++c) {
      if (r == c) {
        os << pad("-");
        continue;
      }
      auto it = at.find({r, c});
      if (it == at.end()) {
        os << pad("?");
        continue;
      }
      const LinkRow& l = *it->second;
      os << pad((l.transport.empty() ? std::string("none") : l.transport) + (l.ok ? "" : "!"));
    }
    os << "\n";
  }
  os << "  ('!': the preflight of that link failed; '?': the rank did not report)\n";
  // Reasons, one line per distinct (transport, reason), with the pairs it covers.
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> reasons;
  for (const LinkRow& r : rows)
    reasons[{r.transport, r.reason}].push_back(std::to_string(r.from) + "->" +
                                               std::to_string(r.to));
  os << "\nWhy\n";
  for (auto& [k, pairs] : reasons) {
    os << "  " << (k.first.empty() ? "none" : k.first) << " for ";
    for (size_t i = 0; i < pairs.size(); ++i) {
      if (i == 6 && pairs.size() > 8) {
        os << " ... (" << pairs.size() << " links)";
        break;
      }
      os << (i ? " " : "") << pairs[i];
    }
    os << ": " << k.second << "\n";
  }
  size_t expected = static_cast<size_t>(world_size) * (world_size - 1);
  size_t passed = 0;
  double slowest = 0;
  for (const LinkRow& r : rows) {
    if (r.ok) ++passed;
    slowest = std::max(slowest, r.ms);
  }
  os << "\nPreflight (8 B and " << human_bytes(bytes) << " each way on every link): " << passed
     << "/" << expected << " links ok";
  if (passed == expected) {
    char buf[64];
    std::snprintf(buf, sizeof buf, ", slowest %.1f ms\n", slowest);
    os << buf;
    return os.str();
  }
  os << "\n";
  std::set<std::pair<int, int>> reported;
  for (const LinkRow& r : rows) reported.insert({r.from, r.to});
  for (int a = 0; a < world_size; ++a)
    for (int b = 0; b < world_size; ++b)
      if (a != b && !reported.count({a, b}))
        os << "  FAILED rank " << a << " -> rank " << b << ": rank " << a << " did not report\n";
  for (const LinkRow& r : rows) {
    if (r.ok) continue;
    os << "  FAILED rank " << r.from << " -> rank " << r.to << " over "
       << (r.transport.empty() ? std::string("(no transport)") : r.transport) << ": " << r.error
       << "\n";
    std::string advice = link_advice(r.transport, r.error);
    if (!advice.empty()) os << "    advice: " << advice << "\n";
  }
  return os.str();
}

int run_links(const LinksOptions& options) {
  InitOptions io;
  io.timeout = options.timeout;
  init_process_group(io);
  std::shared_ptr<ProcessGroup> pg = default_group();
  int me = pg->rank();
  int n = pg->size();
  auto& state = pg->state();
  p2p::Engine& engine = *state.world->engine;
  const std::string& backend = state.info.backend;

  // 1. The choice for every peer (connecting), then the preflight: every rank posts its
  // receives from, and its sends to, every peer it has a link to, then waits for them all.
  std::vector<LinkRow> rows;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    LinkRow r;
    r.from = me;
    r.to = p;
    try {
      p2p::Engine::LinkDescription d = engine.describe_link(backend, p);
      r.transport = d.transport;
      r.reason = d.reason;
    } catch (const std::exception& e) {
      r.reason = e.what();
      r.error = e.what();
    }
    rows.push_back(std::move(r));
  }
  const size_t sizes[2] = {8, options.bytes};
  std::vector<std::vector<uint8_t>> out(rows.size() * 2), in(rows.size() * 2);
  std::vector<std::shared_ptr<Work>> works(rows.size() * 4);
  auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < rows.size(); ++i) {
    LinkRow& r = rows[i];
    if (r.transport.empty()) continue;
    try {
      for (int k = 0; k < 2; ++k) {
        in[2 * i + k].assign(sizes[k], 0);
        out[2 * i + k].resize(sizes[k]);
        for (size_t b = 0; b < sizes[k]; ++b) out[2 * i + k][b] = pattern(me, r.to, b);
        works[4 * i + 2 * k] = pg->irecv(Tensor::of(in[2 * i + k]), r.to, 0x7100 + k);
        works[4 * i + 2 * k + 1] = pg->isend(Tensor::of(out[2 * i + k]), r.to, 0x7100 + k);
      }
    } catch (const std::exception& e) {
      r.error = e.what();
    }
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    LinkRow& r = rows[i];
    if (r.transport.empty() || !r.error.empty()) continue;
    try {
      for (int k = 0; k < 4; ++k)
        if (works[4 * i + k]) works[4 * i + k]->wait(options.timeout);
      for (int k = 0; k < 2 && r.error.empty(); ++k)
        for (size_t b = 0; b < sizes[k]; ++b)
          if (in[2 * i + k][b] != pattern(r.to, me, b)) {
            r.error = "the " + human_bytes(sizes[k]) + " message arrived corrupted (byte " +
                      std::to_string(b) + ")";
            break;
          }
      r.ok = r.error.empty();
      r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                 .count();
    } catch (const std::exception& e) {
      r.error = e.what();
    }
  }

  // 2. Rank 0 gathers every rank's rows through the group's store and prints the report; it
  // leaves last, since under env:// it may be the one serving the store.
  Store& store = *state.store;
  store.set("tpinfo/links/" + std::to_string(me), encode_rows(rows));
  int code = 0;
  for (const LinkRow& r : rows)
    if (!r.ok) code = 1;
  if (me == 0) {
    std::vector<LinkRow> all = rows;
    for (int p = 1; p < n; ++p) {
      std::string what = "tpinfo --links: rows of rank " + std::to_string(p);
      try {
        std::vector<LinkRow> theirs =
            decode_rows(store.get_string("tpinfo/links/" + std::to_string(p)), what);
        for (LinkRow& r : theirs)
          if (!r.ok) code = 1;
        all.insert(all.end(), theirs.begin(), theirs.end());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "tpinfo: %s: %s\n", what.c_str(), e.what());
        code = 1;
      }
    }
    std::string report = format_links(n, all, options.bytes);
    std::fwrite(report.data(), 1, report.size(), stdout);
    std::fflush(stdout);
  }
  store.add("tpinfo/links/left", 1);
  if (me == 0) {
    auto deadline = std::chrono::steady_clock::now() + options.timeout;
    while (store.add("tpinfo/links/left", 0) < n && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  destroy_process_group();
  return code;
}

}  // namespace tpcomm::tpinfo
