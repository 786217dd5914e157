// Publishing and fetching topology summaries for the engine's per-link choice.
#include "p2p/link_choice.h"

#include "core/config.h"
#include "core/log.h"
#include "topology/topology.h"
#include "tpcomm/error.hpp"

namespace tpcomm::p2p {

namespace {

// The machine, discovered once per process (a forked rank inherits its parent's copy).
const topo::Topology* process_topology(std::string* error) {
  static std::mutex mu;
  static std::optional<topo::Topology> topology;
  static std::string failure;
  static bool tried = false;
  std::lock_guard<std::mutex> lk(mu);
  if (!tried) {
    tried = true;
    try {
      topology = topo::load_configured();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  *error = failure;
  return topology ? &*topology : nullptr;
}

}  // namespace

std::string summary_key(int rank) { return "link/topo/" + std::to_string(rank); }

std::unique_ptr<TopoState> publish_summary(Store& store, int rank, const std::string& host_id,
                                           const std::vector<std::string>& usable) {
  auto t = std::make_unique<TopoState>();
  std::string text;
  // A topology the user named must load: falling back to the discovered order would hide the
  // mistake.
  std::string named_error;
  if (!process_topology(&named_error) && !config::get_string("TPCOMM_TOPO_FILE").empty())
    throw ConfigError("TPCOMM_TOPO_FILE='" + config::get_string("TPCOMM_TOPO_FILE") +
                      "' cannot be used: " + named_error);
  try {
    std::string err;
    const topo::Topology* machine = process_topology(&err);
    if (!machine) throw std::runtime_error(err);
    int local_rank =
        config::is_set("LOCAL_RANK") ? static_cast<int>(config::get_int("LOCAL_RANK")) : rank;
    t->mine = topo::local_summary(*machine, rank, local_rank, "", usable);
    t->mine.host_id = host_id;  // the engine's notion of a host (TPCOMM_HOSTID) decides
    text = topo::summary_to_string(t->mine);
    t->ok = true;
  } catch (const std::exception& e) {
    t->error = e.what();
    TPLOG(WARN, TOPO) << "rank " << rank << ": no topology summary (" << e.what()
                      << "); links use the fallback order";
  }
  store.set(summary_key(rank), text);
  return t;
}

std::optional<topo::Summary> peer_summary(TopoState& t, Store& store, int peer) {
  {
    std::lock_guard<std::mutex> lk(t.mu);
    auto it = t.peers.find(peer);
    if (it != t.peers.end()) return it->second;
  }
  std::string text = store.get_string(summary_key(peer));
  std::optional<topo::Summary> s;
  if (!text.empty()) {
    try {
      s = topo::summary_from_string(text, "topology summary of rank " + std::to_string(peer));
    } catch (const std::exception& e) {
      TPLOG(WARN, TOPO) << e.what() << "; the link to rank " << peer << " uses the fallback order";
    }
  }
  std::lock_guard<std::mutex> lk(t.mu);
  t.peers[peer] = s;
  return s;
}

}  // namespace tpcomm::p2p
