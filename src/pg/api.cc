// The free functions of the process-group API: the default (world) group and calls that
// take an optional group and global ranks, as torch.distributed's.
#include <mutex>

#include "core/config.h"
#include "pg/group_state.h"
#include "tpcomm/error.hpp"
#include "tpcomm/process_group.hpp"
#include "tpcomm/rendezvous.hpp"
#include "topology/probe.h"
#include "tpcomm/transport/transport.hpp"

namespace tpcomm {
namespace {

std::mutex g_mu;
std::shared_ptr<ProcessGroup> g_world;

std::shared_ptr<ProcessGroup> resolve(const std::shared_ptr<ProcessGroup>& group,
                                      const char* what) {
  if (group) return group;
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_world)
    throw InvalidArgument(std::string(what) +
                          ": the default process group is not initialized; call "
                          "init_process_group() first");
  return g_world;
}

}  // namespace

void init_process_group(const InitOptions& options) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_world)
    throw InvalidArgument("init_process_group: already initialized (rank " +
                          std::to_string(g_world->rank()) +
                          "); call destroy_process_group() first");
  std::shared_ptr<Store> store = options.store;
  int rank = options.rank, world_size = options.world_size;
  if (store) {
    if (rank < 0 || world_size < 1)
      throw InvalidArgument(
          "init_process_group: with a store, rank and world_size must be "
          "given (got rank " +
          std::to_string(rank) + ", world_size " + std::to_string(world_size) + ")");
  } else {
    auto timeout =
        options.timeout.count() > 0 ? options.timeout : config::get_duration("TPCOMM_TIMEOUT");
    RendezvousResult r = rendezvous(options.init_method, rank, world_size, timeout);
    store = r.store;
    rank = r.rank;
    world_size = r.world_size;
  }
  g_world = ProcessGroup::create(store, rank, world_size, options);
}

void destroy_process_group(const std::shared_ptr<ProcessGroup>& group) {
  std::shared_ptr<ProcessGroup> world;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (group && group != g_world) {
      group->destroy();
      return;
    }
    if (!g_world)
      throw InvalidArgument(
          "destroy_process_group: the default process group is not "
          "initialized");
    world.swap(g_world);
  }
  world->destroy();
}

bool is_initialized() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_world != nullptr;
}

std::shared_ptr<ProcessGroup> default_group() { return resolve(nullptr, "default_group"); }

namespace {

// Built into this library and usable on this machine (libucp loadable; an RDMA device
// listed), probed once per process.
bool usable_here(const std::string& name) {
  static const std::vector<topo::TransportProbe> probes = topo::probe_transports();
  if (!transport::has_transport(name)) return false;
  for (const topo::TransportProbe& p : probes)
    if (p.name == name) return p.built && p.usable;
  return true;  // a transport the probes do not know: being built in is all we can say
}

}  // namespace

// Honest about this build and this machine: process groups always work (shm and tcp are
// always built); 'gloo' is accepted as the name torch code uses for CPU tensors; there is no
// MPI; NCCL only when a transport of that name is built in.
bool is_available() { return true; }
bool is_nccl_available() { return transport::has_transport("nccl"); }
bool is_gloo_available() { return true; }
bool is_mpi_available() { return false; }
bool is_ucx_available() { return usable_here("ucx"); }
bool is_ibverbs_available() { return usable_here("ibverbs"); }

int get_rank(const std::shared_ptr<ProcessGroup>& group) {
  return resolve(group, "get_rank")->rank();
}
int get_world_size(const std::shared_ptr<ProcessGroup>& group) {
  return resolve(group, "get_world_size")->size();
}
std::string get_backend(const std::shared_ptr<ProcessGroup>& group) {
  return resolve(group, "get_backend")->backend();
}

std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks,
                                        std::optional<std::chrono::milliseconds> timeout,
                                        const std::string& backend) {
  return resolve(nullptr, "new_group")->new_group(ranks, timeout, backend);
}

int get_group_rank(const std::shared_ptr<ProcessGroup>& group, int global_rank) {
  return resolve(group, "get_group_rank")->group_rank(global_rank);
}
int get_global_rank(const std::shared_ptr<ProcessGroup>& group, int group_rank) {
  return resolve(group, "get_global_rank")->global_rank(group_rank);
}
std::vector<int> get_process_group_ranks(const std::shared_ptr<ProcessGroup>& group) {
  return resolve(group, "get_process_group_ranks")->ranks();
}

namespace {

int to_group(const ProcessGroup& g, int global, const char* what, bool allow_any) {
  if (allow_any && global == kAnySource) return kAnySource;
  if (g.state().is_world) return global;  // range checked by the method
  int r = g.state().find_group_rank(global);
  if (r < 0)
    throw InvalidArgument(std::string(what) + ": global rank " + std::to_string(global) +
                          " is not a member of group '" + g.name() + "'");
  return r;
}

}  // namespace

std::shared_ptr<Work> send(const Tensor& tensor, int dst,
                           const std::shared_ptr<ProcessGroup>& group, int tag) {
  auto g = resolve(group, "send");
  return g->send(tensor, to_group(*g, dst, "send", false), tag);
}

int recv(const Tensor& tensor, int src, const std::shared_ptr<ProcessGroup>& group, int tag) {
  auto g = resolve(group, "recv");
  auto w = g->recv(tensor, to_group(*g, src, "recv", true), tag);
  return g->global_rank(w->source_rank());
}

std::shared_ptr<Work> isend(const Tensor& tensor, int dst,
                            const std::shared_ptr<ProcessGroup>& group, int tag) {
  auto g = resolve(group, "isend");
  return g->isend(tensor, to_group(*g, dst, "isend", false), tag);
}

std::shared_ptr<Work> irecv(const Tensor& tensor, int src,
                            const std::shared_ptr<ProcessGroup>& group, int tag) {
  auto g = resolve(group, "irecv");
  return g->irecv(tensor, to_group(*g, src, "irecv", true), tag);
}

P2POp::P2POp(Func op, const Tensor& tensor, int peer, std::shared_ptr<ProcessGroup> group, int tag)
    : kind(Kind::Send), tensor(tensor), peer(peer), group(std::move(group)), tag(tag) {
  if (op == &tpcomm::isend) {
    kind = Kind::Send;
  } else if (op == &tpcomm::irecv) {
    kind = Kind::Recv;
  } else {
    throw InvalidArgument("P2POp: op must be tpcomm::isend or tpcomm::irecv");
  }
}

std::vector<std::shared_ptr<Work>> batch_isend_irecv(const std::vector<P2POp>& ops) {
  // Validate everything first, so that a bad entry posts nothing.
  std::vector<std::pair<std::shared_ptr<ProcessGroup>, int>> resolved;
  resolved.reserve(ops.size());
  for (const P2POp& op : ops) {
    auto g = resolve(op.group, "batch_isend_irecv");
    bool recv = op.kind == P2POp::Kind::Recv;
    int peer = to_group(*g, op.peer, "batch_isend_irecv", recv);
    g->state().check_usable("batch_isend_irecv");
    g->state().check_peer("batch_isend_irecv", peer, recv);
    resolved.emplace_back(g, peer);
  }
  std::vector<std::shared_ptr<Work>> works;
  works.reserve(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    auto& [g, peer] = resolved[i];
    works.push_back(ops[i].kind == P2POp::Kind::Send ? g->isend(ops[i].tensor, peer, ops[i].tag)
                                                     : g->irecv(ops[i].tensor, peer, ops[i].tag));
  }
  return works;
}

}  // namespace tpcomm
