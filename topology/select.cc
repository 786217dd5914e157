// Transport choice per link. Both ends order the pair the same way (by host id, then rank) and
// decide on that order, so the answer and its reason are the same at both ends.
#include "topology/select.h"

#include <algorithm>
#include <cctype>
#include <tuple>

#include "core/config.h"

namespace tpcomm::topo {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string side_name(const Summary& s) {
  return s.rank >= 0 ? "rank " + std::to_string(s.rank) : "host '" + s.host_id + "'";
}

bool before(const Summary& a, const Summary& b) {
  return std::tie(a.host_id, a.rank, a.local_rank, a.gpu, a.numa) <
         std::tie(b.host_id, b.rank, b.local_rank, b.gpu, b.numa);
}

bool uses_gpu(const Summary& s, Memory m) { return m == Memory::Device && !s.gpu.empty(); }

const NicPick& pick_for(const Summary& s, Memory m) {
  return uses_gpu(s, m) ? s.gpu_nic : s.host_nic;
}

std::string kind_words(const std::string& kind) {
  if (kind == "efa") return "AWS EFA, which speaks SRD through libfabric, not verbs RC";
  if (kind == "iwarp") return "iWARP, which the ibverbs transport does not drive";
  if (kind == "ib") return "InfiniBand";
  if (kind == "roce") return "RoCE (RDMA over Ethernet)";
  return "of unknown link layer";
}

// One side of an RDMA link in words: "rank 0 mlx5_0:1 (PIX to cuda0, GPUDirect)".
std::string rdma_side(const Summary& s, Memory m) {
  const NicPick& p = pick_for(s, m);
  std::string out =
      side_name(s) + " " + p.nic + ":" + std::to_string(p.port) + " (" + relation_name(p.relation);
  if (uses_gpu(s, m)) {
    const Gpu* g = s.my_gpu();
    out += std::string(" to ") + (g ? g->label() : s.gpu) +
           (p.gdr ? ", GPUDirect RDMA" : ", no GPUDirect: " + p.gdr_why);
  } else {
    out += s.numa >= 0 ? " to NUMA " + std::to_string(s.numa) : " to an unbound rank";
  }
  return out + ")";
}

struct Decision {
  std::string transport;
  bool cuda_ipc = false;
  std::string reason;
};

class Decider {
 public:
  Decider(const Summary& x, const Summary& y, const std::vector<std::string>& available,
          const SelectOptions& o)
      : x_(x), y_(y), available_(available), o_(o) {
    same_host_ = !x.host_id.empty() && x.host_id == y.host_id;
  }

  Decision run() {
    std::vector<std::string> order =
        o_.prefer.empty() ? default_transport_order(same_host_) : o_.prefer;
    std::vector<std::string> skipped;
    for (const std::string& t : order) {
      std::string no = why_not(t);
      if (!no.empty()) {
        skipped.push_back(t + " (" + no + ")");
        continue;
      }
      Decision d;
      d.transport = t;
      d.reason = t + ": " + why(t, &d.cuda_ipc);
      if (!o_.prefer.empty()) d.reason += "; TPCOMM_TRANSPORT=" + join(o_.prefer, ",");
      if (!skipped.empty()) d.reason += "; not " + join(skipped, ", ");
      return d;
    }
    Decision d;
    d.reason = "no transport can join " + side_name(x_) + " and " + side_name(y_) + ": " +
               join(skipped, "; ") +
               ". Check TPCOMM_TRANSPORT and TPCOMM_SHM_DISABLE, and run tpinfo on both hosts.";
    return d;
  }

 private:
  std::string why_not(const std::string& t) const {
    if (contains(o_.exclude, t)) return "excluded by TPCOMM_TRANSPORT";
    if (t == "shm" && o_.shm_disable) return "TPCOMM_SHM_DISABLE is set";
    if (!contains(available_, t)) return "not built in or not usable here; see tpinfo";
    for (const Summary* s : {&x_, &y_})
      if (!s->transports.empty() && !contains(s->transports, t))
        return "not usable at " + side_name(*s);
    if (t == "shm" && !same_host_)
      return "different hosts '" + x_.host_id + "' and '" + y_.host_id + "'";
    if (t == "ibverbs") {
      const NicPick& px = pick_for(x_, o_.memory);
      const NicPick& py = pick_for(y_, o_.memory);
      for (auto [s, p] : {std::pair{&x_, &px}, std::pair{&y_, &py}}) {
        if (p->nic.empty()) return side_name(*s) + ": " + p->why;
        if (p->kind != "ib" && p->kind != "roce")
          return side_name(*s) + "'s nearest RDMA device " + p->nic + " is " + kind_words(p->kind);
      }
      if (px.kind != py.kind)
        return "link layers differ: " + side_name(x_) + " " + px.nic + " is " +
               kind_words(px.kind) + ", " + side_name(y_) + " " + py.nic + " is " +
               kind_words(py.kind);
    }
    return "";
  }

  std::string why(const std::string& t, bool* cuda_ipc) const {
    std::string where = same_host_
                            ? "same host '" + x_.host_id + "'"
                            : "different hosts '" + x_.host_id + "' and '" + y_.host_id + "'";
    bool gx = uses_gpu(x_, o_.memory), gy = uses_gpu(y_, o_.memory);
    if (t == "shm") {
      if (gx && gy) {
        const Gpu* a = x_.my_gpu();
        const Gpu* b = nullptr;
        for (const Gpu& g : x_.gpus)
          if (g.pci.busid == y_.gpu) b = &g;
        if (!b) b = y_.my_gpu();
        std::string how;
        if (a && b && gpus_peer_reachable(*a, *b, &how)) {
          *cuda_ipc = true;
          return where + "; " + a->label() + " and " + b->label() + " reach each other (" + how +
                 "): CUDA IPC";
        }
        return where + "; " + (a ? a->label() : x_.gpu) + " and " + (b ? b->label() : y_.gpu) +
               ": " + how + ": GPU memory staged through host shared memory";
      }
      if (gx || gy) return where + "; GPU memory staged through host shared memory";
      return where;
    }
    if (t == "ibverbs")
      return where + "; " + rdma_side(x_, o_.memory) + " <-> " + rdma_side(y_, o_.memory);
    if (gx || gy) return where + "; GPU memory staged through host memory";
    return where;
  }

  const Summary& x_;
  const Summary& y_;
  const std::vector<std::string>& available_;
  const SelectOptions& o_;
  bool same_host_ = false;
};

}  // namespace

SelectOptions SelectOptions::from_config(Memory m) {
  SelectOptions o;
  for (const std::string& item : config::get_list("TPCOMM_TRANSPORT")) {
    std::string v = lower(item);
    if (!v.empty() && v[0] == '^') {
      o.exclude.push_back(v.substr(1));
    } else if (!contains(o.prefer, v)) {
      o.prefer.push_back(v);
    }
  }
  o.shm_disable = config::get_bool("TPCOMM_SHM_DISABLE");
  o.memory = m;
  return o;
}

std::vector<std::string> default_transport_order(bool same_host) {
  if (same_host) return {"shm", "ibverbs", "ucx", "tcp"};
  return {"ibverbs", "ucx", "tcp"};
}

LinkChoice select_link(const Summary& mine, const Summary& peer,
                       const std::vector<std::string>& available, const SelectOptions& opts) {
  bool mine_first = !before(peer, mine);
  const Summary& x = mine_first ? mine : peer;
  const Summary& y = mine_first ? peer : mine;
  Decision d = Decider(x, y, available, opts).run();
  LinkChoice c;
  c.transport = d.transport;
  c.reason = d.reason;
  c.cuda_ipc = d.cuda_ipc;
  if (c.transport == "ibverbs") {
    const NicPick& pm = pick_for(mine, opts.memory);
    const NicPick& pp = pick_for(peer, opts.memory);
    c.nic = pm.nic;
    c.port = pm.port;
    c.gdr = uses_gpu(mine, opts.memory) && pm.gdr;
    c.peer_nic = pp.nic;
    c.peer_port = pp.port;
    c.peer_gdr = uses_gpu(peer, opts.memory) && pp.gdr;
  }
  return c;
}

std::string describe(const Summary& mine, const Summary& peer, const LinkChoice& c) {
  std::string out = side_name(mine) + " -> " + side_name(peer) + ": ";
  if (!c.ok()) return out + "no transport: " + c.reason;
  out += c.transport;
  if (!c.nic.empty())
    out += " on " + c.nic + ":" + std::to_string(c.port) + (c.gdr ? " (GPUDirect)" : "") + " to " +
           c.peer_nic + ":" + std::to_string(c.peer_port) + (c.peer_gdr ? " (GPUDirect)" : "");
  if (c.cuda_ipc) out += " with CUDA IPC";
  return out + " [" + c.reason + "]";
}

}  // namespace tpcomm::topo
