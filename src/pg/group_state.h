// What a ProcessGroup is made of (detail::GroupState), shared by the group's methods in
// src/pg/.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "p2p/engine.h"
#include "tpcomm/process_group.hpp"
#include "tpcomm/store.hpp"

namespace tpcomm::detail {

/// State shared by every group of one world (one init_process_group or
/// ProcessGroup::create).
struct WorldState {
  std::shared_ptr<p2p::Engine> engine;
  std::shared_ptr<Store> root;  ///< the user's store, prefixed for this world instance
  std::string root_prefix;
  int rank = -1;
  int world_size = 0;
  std::chrono::milliseconds timeout{300000};
  std::mutex mu;
  std::map<std::string, int> instances;  ///< member-list key -> groups made with it here
  std::vector<std::weak_ptr<GroupState>> groups;
  bool destroyed = false;
};

struct CollState;  // pg/coll_run.h

struct GroupState {
  std::shared_ptr<WorldState> world;
  p2p::GroupInfo info;           ///< id, name, backend, members (global ranks)
  int rank = -1;                 ///< this process's group rank; -1: not a member
  std::shared_ptr<Store> store;  ///< private to this group (collectives' metadata)
  std::chrono::milliseconds timeout{300000};
  std::atomic<bool> destroyed{false};
  bool is_world = false;
  std::mutex coll_mu;
  std::shared_ptr<CollState> coll;  ///< collectives' state, made on first use (pg/coll_run.h)
  /// coll.get() once made (set under coll_mu, never reset): read without the lock per call.
  std::atomic<CollState*> coll_ptr{nullptr};

  int size() const { return static_cast<int>(info.ranks.size()); }
  /// Throws InvalidArgument for a destroyed group or a non-member; `what` names the call.
  void check_usable(const char* what) const;
  /// Throws InvalidArgument unless 0 <= peer < size and peer != rank.
  void check_peer(const char* what, int peer, bool allow_any) const;
  /// Group rank of a global rank, or -1.
  int find_group_rank(int global_rank) const;
};

/// 64-bit FNV-1a, for group ids and store keys.
uint64_t fnv1a(const std::string& s);

/// The host identity: TPCOMM_HOSTID, else the host name and boot id.
std::string host_identity();

}  // namespace tpcomm::detail
