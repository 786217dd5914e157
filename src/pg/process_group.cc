// ProcessGroup: creation of worlds and subgroups, membership, point-to-point methods.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/config.h"
#include "core/deadline.h"
#include "core/log.h"
#include "cuda/cuda.h"
#include "pg/coll_run.h"
#include "pg/cuda_staging.h"
#include "pg/group_state.h"
#include "pg/p2p_work.h"
#include "tpcomm/error.hpp"
#include "tpcomm/transport/transport.hpp"
#include "tpcomm/version.hpp"

namespace tpcomm {
namespace detail {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string host_identity() {
  if (config::is_set("TPCOMM_HOSTID")) return config::get_string("TPCOMM_HOSTID");
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return std::string(name) + (boot.empty() ? "" : "/" + boot);
}

namespace {

std::string list(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i == 8 && v.size() > 10) return s + ", ... (" + std::to_string(v.size()) + " ranks)";
    s += (i ? "," : "") + std::to_string(v[i]);
  }
  return s;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void check_backend(const std::string& b) {
  if (b == "auto" || b == "gloo" || b.empty()) return;
  if (b == "nccl")
    throw NotSupportedError(
        "backend 'nccl' is not available for point-to-point in this build "
        "(the NCCL engine arrives in a later release); use 'auto'");
  if (!transport::has_transport(b)) {
    std::string known;
    for (auto& n : transport::transport_names()) known += ", " + n;
    throw InvalidArgument("unknown backend '" + b + "': use auto, gloo" + known);
  }
}

}  // namespace

void GroupState::check_usable(const char* what) const {
  if (destroyed.load() || (world && world->destroyed))
    throw InvalidArgument(std::string(what) + ": process group '" + info.name +
                          "' was destroyed; create a new one");
  if (rank < 0)
    throw InvalidArgument(std::string(what) + ": this process (global rank " +
                          std::to_string(world ? world->rank : -1) +
                          ") is not a member of group '" + info.name + "' (ranks " +
                          list(info.ranks) + ")");
}

void GroupState::check_peer(const char* what, int peer, bool allow_any) const {
  if (allow_any && peer == kAnySource) return;
  if (peer < 0 || peer >= size())
    throw InvalidArgument(std::string(what) + ": rank " + std::to_string(peer) +
                          " is out of range for group '" + info.name + "' of size " +
                          std::to_string(size()) + " (valid: 0.." + std::to_string(size() - 1) +
                          (allow_any ? ", or kAnySource" : "") + ")");
  if (peer == rank)
    throw InvalidArgument(std::string(what) + ": rank " + std::to_string(rank) +
                          " cannot communicate with itself in group '" + info.name +
                          "'; copy the tensor locally instead");
}

int GroupState::find_group_rank(int global_rank) const {
  if (is_world) return global_rank >= 0 && global_rank < size() ? global_rank : -1;
  auto it = std::lower_bound(info.ranks.begin(), info.ranks.end(), global_rank);
  return it != info.ranks.end() && *it == global_rank ? static_cast<int>(it - info.ranks.begin())
                                                      : -1;
}

// "host:port" of the TCPStore under `store` (through PrefixStores), or "" for another kind.
std::string store_address(const std::shared_ptr<Store>& store) {
  std::shared_ptr<Store> s = store;
  while (auto* p = dynamic_cast<PrefixStore*>(s.get())) s = p->underlying();
  if (auto* t = dynamic_cast<TCPStore*>(s.get()))
    return t->host() + ":" + std::to_string(t->port());
  return "";
}

// Returns once every rank of the world has started its engine (each publishes its
// "link/host/<rank>" last), or throws TimeoutError at `dl` naming the ranks that did not.
// Non-blocking look-ups, 1 to 50 ms apart, so that the missing ranks can be named.
void wait_for_join(Store& p2p_store, const std::shared_ptr<Store>& user_store, int rank,
                   int world_size, Deadline dl, std::chrono::milliseconds timeout) {
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back("link/host/" + std::to_string(r));
  auto pause = std::chrono::milliseconds(1);
  while (!p2p_store.check(keys)) {
    if (dl.expired()) {
      std::vector<int> missing;
      for (int r = 0; r < world_size; ++r)
        if (!p2p_store.check({keys[static_cast<size_t>(r)]})) missing.push_back(r);
      std::string where;
      if (config::is_set("LOCAL_WORLD_SIZE")) {
        // tprun starts LOCAL_WORLD_SIZE ranks per node, node n from rank n x that.
        const int64_t per_node = config::get_int("LOCAL_WORLD_SIZE");
        std::vector<int> nodes;
        for (int r : missing) {
          const int node = static_cast<int>(r / std::max<int64_t>(per_node, 1));
          if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
        }
        where = " (they belong on node" + std::string(nodes.size() > 1 ? "s " : " ") + list(nodes) +
                " of a tprun job of " + std::to_string(per_node) + " per node)";
      }
      const std::string addr = store_address(user_store);
      throw TimeoutError(
          "init_process_group: rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
          ": rank" + (missing.size() > 1 ? "s " : " ") + list(missing) + " did not join within " +
          std::to_string(timeout.count()) + " ms" + where +
          "; every rank of the world must call "
          "init_process_group with the same store" +
          (addr.empty() ? std::string() : " (here the TCPStore at " + addr + ")") +
          ". Start the missing ranks, or raise the timeout (TPCOMM_TIMEOUT or the init options)");
    }
    std::this_thread::sleep_for(std::min(pause, dl.remaining()));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace detail

using detail::GroupState;
using detail::WorldState;

std::shared_ptr<ProcessGroup> ProcessGroup::create(std::shared_ptr<Store> store, int rank,
                                                   int world_size, const InitOptions& options) {
  if (!store) throw InvalidArgument("ProcessGroup::create: no store given");
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw InvalidArgument("ProcessGroup::create: rank " + std::to_string(rank) +
                          " and world_size " + std::to_string(world_size) +
                          " are invalid (need 0 <= rank < world_size)");
  transport::register_builtin_transports();
  for (const std::string& w : config::validate()) log::notice_once(w);
  std::string backend = options.backend.empty() ? std::string("auto") : options.backend;
  detail::check_backend(backend);
  auto timeout =
      options.timeout.count() > 0 ? options.timeout : config::get_duration("TPCOMM_TIMEOUT");
  auto world = std::make_shared<WorldState>();
  world->rank = rank;
  world->world_size = world_size;
  world->timeout = timeout;
  // A fresh key space per world instance: re-initialising over the same store never reads
  // the previous instance's addresses.
  int64_t gen = store->add("tpcomm/init/" + std::to_string(rank), 1);
  world->root_prefix = "tpcomm/" + std::to_string(gen);
  world->root = std::make_shared<PrefixStore>(world->root_prefix, store);

  p2p::Engine::Options eo;
  eo.rank = rank;
  eo.world_size = world_size;
  eo.store = std::make_shared<PrefixStore>("p2p", world->root);
  eo.job_id = config::get_string("TPCOMM_JOB_ID");
  if (eo.job_id.empty()) eo.job_id = "default";
  eo.host_id = detail::host_identity();
  eo.timeout = timeout;
  eo.backend = backend;
  world->engine = p2p::Engine::create(eo);
  // The world exists once every rank has joined: a job started short fails here, on every
  // rank that started, naming the missing ones (not later, on a store key).
  detail::wait_for_join(*eo.store, store, rank, world_size, Deadline::after(timeout), timeout);
  world->engine->resolve_peers();  // every rank's liveness record is there by now

  auto g = std::make_shared<GroupState>();
  g->world = world;
  g->is_world = true;
  g->rank = rank;
  g->timeout = timeout;
  g->info.name = options.group_name.empty() ? std::string("default_pg") : options.group_name;
  g->info.backend = backend;
  g->info.id = detail::fnv1a(world->root_prefix + "/pg/world");
  g->info.ranks.resize(world_size);
  for (int i = 0; i < world_size; ++i) g->info.ranks[i] = i;
  g->store = std::make_shared<PrefixStore>("pg/world", world->root);
  world->engine->add_group(g->info);
  world->groups.push_back(g);
  TPLOG(INFO, INIT) << "rank " << rank << "/" << world_size << ": process group '" << g->info.name
                    << "' up (tpcomm " << version() << ", build: " << build_options()
                    << "; backend " << backend << ", host '" << eo.host_id << "')";
  if (config::get_enum("TPCOMM_CONNECT") == "eager")
    world->engine->connect_all(backend, g->info.ranks, Deadline::after(timeout));
  return std::make_shared<ProcessGroup>(g);
}

ProcessGroup::ProcessGroup(std::shared_ptr<detail::GroupState> state) : state_(std::move(state)) {}
ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::rank() const { return state_->rank; }
int ProcessGroup::size() const { return state_->size(); }
const std::string& ProcessGroup::backend() const { return state_->info.backend; }
const std::string& ProcessGroup::name() const { return state_->info.name; }
std::chrono::milliseconds ProcessGroup::timeout() const { return state_->timeout; }
const std::vector<int>& ProcessGroup::ranks() const { return state_->info.ranks; }
bool ProcessGroup::is_destroyed() const {
  return state_->destroyed.load() || state_->world->destroyed;
}

int ProcessGroup::group_rank(int global_rank) const {
  int r = state_->find_group_rank(global_rank);
  if (r < 0)
    throw InvalidArgument("global rank " + std::to_string(global_rank) +
                          " is not a member of group '" + name() + "' (ranks " +
                          detail::list(ranks()) + ")");
  return r;
}

int ProcessGroup::global_rank(int group_rank) const {
  if (group_rank < 0 || group_rank >= size())
    throw InvalidArgument("group rank " + std::to_string(group_rank) +
                          " is out of range for group '" + name() + "' of size " +
                          std::to_string(size()));
  return state_->info.ranks[group_rank];
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(
    const std::vector<int>& global_ranks, std::optional<std::chrono::milliseconds> timeout,
    const std::string& backend) {
  auto& world = state_->world;
  if (is_destroyed())
    throw InvalidArgument("new_group: process group '" + name() + "' was destroyed");
  std::vector<int> members = global_ranks;
  if (members.empty())
    for (int i = 0; i < world->world_size; ++i) members.push_back(i);
  std::sort(members.begin(), members.end());
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= world->world_size)
      throw InvalidArgument("new_group: rank " + std::to_string(members[i]) +
                            " is out of range for a world of size " +
                            std::to_string(world->world_size));
    if (i && members[i] == members[i - 1])
      throw InvalidArgument("new_group: rank " + std::to_string(members[i]) + " is listed twice");
  }
  std::string b = backend.empty() ? state_->info.backend : backend;
  detail::check_backend(b);
  auto g = std::make_shared<GroupState>();
  g->world = world;
  g->timeout = timeout && timeout->count() > 0 ? *timeout : world->timeout;
  g->info.backend = b;
  g->info.ranks = members;
  g->rank = g->find_group_rank(world->rank);
  std::string joined;
  for (int m : members) joined += std::to_string(m) + ",";
  std::string key = detail::hex64(detail::fnv1a(joined));
  if (g->rank < 0) {
    g->info.name = "group_" + key + "(non-member)";
    return std::make_shared<ProcessGroup>(g);
  }
  int instance;
  {
    std::lock_guard<std::mutex> lk(world->mu);
    instance = world->instances[key]++;
  }
  // Members agree on (member list, how many groups with that list each made before): the
  // key space is disjoint for disjoint groups and for repeated ones.
  std::string prefix = "pg/" + key + "-" + std::to_string(instance);
  g->info.id = detail::fnv1a(world->root_prefix + "/" + prefix);
  g->info.name = "group_" + key.substr(0, 8) + "_" + std::to_string(instance);
  g->store = std::make_shared<PrefixStore>(prefix, world->root);
  world->engine->prepare_backend(b);
  world->engine->add_group(g->info);
  {
    std::lock_guard<std::mutex> lk(world->mu);
    world->groups.push_back(g);
  }
  TPLOG(INFO, INIT) << "rank " << world->rank << ": new group '" << g->info.name << "' (ranks "
                    << detail::list(members) << ", backend " << b << ")";
  return std::make_shared<ProcessGroup>(g);
}

namespace {

void check_tensor(const char* what, const Tensor& t) {
  if (t.numel < 0)
    throw InvalidArgument(std::string(what) + ": tensor has negative numel " +
                          std::to_string(t.numel));
  if (t.numel > 0 && !t.data)
    throw InvalidArgument(std::string(what) + ": tensor " + t.str() + " has no data pointer");
  if (t.device.type != DeviceType::CPU)
    cuda::refuse_device_tensor(t, std::string(what) + ": tensor");
}

// The three checks of a point-to-point call in one pass: the common case (all pass) reads a
// few fields and builds nothing; a failure goes through the checks above, in their order, for
// the message.
inline void check_p2p(const detail::GroupState& st, const char* what, int peer, bool allow_any,
                      const Tensor& t) {
  bool ok =
      !st.destroyed.load() && st.world && !st.world->destroyed && st.rank >= 0 &&
      ((allow_any && peer == kAnySource) || (peer >= 0 && peer < st.size() && peer != st.rank)) &&
      t.numel >= 0 && (t.numel == 0 || t.data) && t.device.type == DeviceType::CPU;
  if (ok) [[likely]]
    return;
  st.check_usable(what);
  st.check_peer(what, peer, allow_any);
  check_tensor(what, t);
}

}  // namespace

namespace {

detail::P2PWork::Made post_isend(const std::shared_ptr<detail::GroupState>& st,
                                 const Tensor& tensor, int dst, int tag) {
  check_p2p(*st, "isend", dst, false, tensor);
  auto w = detail::P2PWork::make(st);
  st->world->engine->post_send(st->info, st->info.ranks[dst], tag, tensor, w.op);
  return w;
}

detail::P2PWork::Made post_irecv(const std::shared_ptr<detail::GroupState>& st,
                                 const Tensor& tensor, int src, int tag) {
  check_p2p(*st, "irecv", src, true, tensor);
  int global = src == kAnySource ? p2p::kAnySource : st->info.ranks[src];
  auto w = detail::P2PWork::make(st);
  st->world->engine->post_recv(st->info, global, tag, tensor, w.op);
  return w;
}

}  // namespace

std::shared_ptr<Work> ProcessGroup::isend(const Tensor& tensor, int dst, int tag) {
  if (detail::is_cuda(tensor)) [[unlikely]]
    return detail::staged_send(*this, tensor, dst, tag, true);
  return post_isend(state_, tensor, dst, tag).release();
}

std::shared_ptr<Work> ProcessGroup::irecv(const Tensor& tensor, int src, int tag) {
  if (detail::is_cuda(tensor)) [[unlikely]]
    return detail::staged_recv(*this, tensor, src, tag, true);
  return post_irecv(state_, tensor, src, tag).release();
}

// The blocking forms wait through the engine this group owns (alive during the call), so the
// wait takes no reference on it.
std::shared_ptr<Work> ProcessGroup::send(const Tensor& tensor, int dst, int tag) {
  // An eager message that goes out at once is complete when the call returns: the shared
  // completed Work, no Work or Op of its own. Anything else takes the general path.
  if (detail::is_cuda(tensor)) [[unlikely]]
    return detail::staged_send(*this, tensor, dst, tag, false);
  check_p2p(*state_, "isend", dst, false, tensor);
  if (state_->world->engine->send_now(state_->info, state_->info.ranks[dst], tag, tensor))
    return detail::done_work();
  auto w = post_isend(state_, tensor, dst, tag);
  w.work->wait_in(*state_->world->engine);
  return w.release();
}

std::shared_ptr<Work> ProcessGroup::recv(const Tensor& tensor, int src, int tag) {
  if (detail::is_cuda(tensor)) [[unlikely]]
    return detail::staged_recv(*this, tensor, src, tag, false);
  auto w = post_irecv(state_, tensor, src, tag);
  w.work->wait_in(*state_->world->engine);
  return w.release();
}

void ProcessGroup::destroy() {
  auto& world = state_->world;
  if (state_->destroyed.exchange(true)) return;
  if (state_->rank < 0) return;
  detail::shutdown_collectives(*state_);
  if (!state_->is_world) {
    if (!world->destroyed) world->engine->remove_group(state_->info.id);
    return;
  }
  std::vector<std::shared_ptr<GroupState>> others;
  {
    std::lock_guard<std::mutex> lk(world->mu);
    world->destroyed = true;
    for (auto& w : world->groups)
      if (auto g = w.lock()) others.push_back(g);
  }
  for (auto& g : others) g->destroyed = true;
  for (auto& g : others) detail::shutdown_collectives(*g);
  world->engine->shutdown();
  TPLOG(INFO, INIT) << "rank " << world->rank << ": process group '" << name() << "' destroyed";
}

}  // namespace tpcomm
