// The topology side of the engine's link choice: each rank publishes its topology summary
// (topology/select.h) through the world store, and the engine asks topo::select_link for every
// peer, so that both ends of a link pick the same transport from the hardware and can say why.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "topology/select.h"
#include "tpcomm/store.hpp"

namespace tpcomm::p2p {

/// This rank's summary and the peers' summaries fetched so far.
struct TopoState {
  bool ok = false;     ///< false: discovery failed here; links use the fallback order
  std::string error;   ///< why discovery failed
  topo::Summary mine;  ///< valid when ok
  std::mutex mu;
  std::unordered_map<int, std::optional<topo::Summary>> peers;  ///< nullopt: peer had none
};

/// Store key of rank `rank`'s summary (an empty value means it has none).
std::string summary_key(int rank);

/// Discovers this machine (once per process; TPCOMM_TOPO_FILE is honoured), builds this rank's
/// summary with `host_id` and the `usable` transports, and publishes it. Never throws for a
/// discovery failure: it is recorded (and logged) and an empty summary is published.
std::unique_ptr<TopoState> publish_summary(Store& store, int rank, const std::string& host_id,
                                           const std::vector<std::string>& usable);

/// The summary of `peer` (a store round trip the first time; blocks until the peer has
/// published). nullopt when the peer published none or an unreadable one (logged).
std::optional<topo::Summary> peer_summary(TopoState& t, Store& store, int peer);

}  // namespace tpcomm::p2p
