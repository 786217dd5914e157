// Process groups and point-to-point communication: the torch.distributed (c10d) surface in
// C++ (API.md). Peers are global ranks in the free functions and group ranks in the
// ProcessGroup methods, as in torch.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tpcomm/store.hpp"
#include "tpcomm/types.hpp"

namespace tpcomm {

/// Source of a receive that accepts a message from any rank.
inline constexpr int kAnySource = -1;

/// Names of backends, as torch's `Backend` constants. `auto` lets the topology pick the
/// transport of each link; `gloo` is accepted for CPU tensors and means `auto`.
struct Backend {
  static constexpr const char* AUTO = "auto";
  static constexpr const char* TCP = "tcp";
  static constexpr const char* SHM = "shm";
  static constexpr const char* UCX = "ucx";
  static constexpr const char* IBVERBS = "ibverbs";
  static constexpr const char* NCCL = "nccl";
  static constexpr const char* GLOO = "gloo";
};

/// The handle of an operation. wait() rethrows the operation's error; is_success() and
/// exception() inspect it without throwing. A successful blocking collective returns one
/// shared, already completed Work that owns no reference count: use the shared_ptr as a
/// value (a weak_ptr to it is expired at once).
class Work {
 public:
  virtual ~Work() = default;
  /// Blocks until done, or until `timeout` (default: the group's timeout) passes, which
  /// throws TimeoutError saying what the operation waits for. Returns true.
  virtual bool wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt) = 0;
  /// Non-blocking: done (successfully or not)? Also drives progress.
  virtual bool is_completed() = 0;
  /// Done without error.
  virtual bool is_success() = 0;
  /// The error of a failed operation, else null.
  virtual std::exception_ptr exception() = 0;
  /// For a receive: the sender's rank in the operation's group (-1 before completion).
  virtual int source_rank() = 0;
  /// Blocks the host until the operation is complete on the GPU too: for CUDA tensors, wait()
  /// then until the copies of the result queued on the operation's stream have run (wait()
  /// only queues them, as torch's ProcessGroupNCCL). For host tensors it is wait().
  virtual void synchronize(std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
    wait(timeout);
  }
};

/// Options of init_process_group (torch's keyword arguments).
struct InitOptions {
  std::string backend = Backend::AUTO;
  /// env:// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), tcp://host:port, file:///path.
  /// Ignored when `store` is given.
  std::string init_method = "env://";
  int rank = -1;
  int world_size = -1;
  /// Deadline of every blocking call of the group; <= 0: TPCOMM_TIMEOUT (default 300 s).
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<Store> store;
  std::string group_name;
};

/// Per-call options of the collectives (torch's async_op and timeout, plus tpcomm's own).
struct CollectiveOptions {
  /// Return at once with a pending Work; the call runs on the group's collective thread, in
  /// call order with the group's other collectives. false: block, return a completed Work.
  bool async_op = false;
  /// Deadline of this call; <= 0: the group's timeout.
  std::chrono::milliseconds timeout{0};
  /// PREMUL_SUM's factor (each input is multiplied by it before the sum).
  double premul_scale = 1.0;
  /// Forces an algorithm by catalogue name (docs/collectives.md); empty: TPCOMM_ALGO, then
  /// the cost model. Every rank must pass the same.
  std::string algorithm;
  /// CUDA tensors: the stream (an opaque CUstream; nullptr: the legacy default stream) the
  /// operation is ordered after and whose later work sees its result (docs/gpu.md).
  void* stream = nullptr;
};

class ProcessGroup;
namespace detail {
struct GroupState;
}

/// A set of ranks that communicate. Every operation is a method; the free functions below
/// call them on the default (world) group unless given another. A ProcessGroup returned to
/// a rank that is not a member (new_group called by everyone) has rank() == -1 and refuses
/// operations.
class ProcessGroup {
 public:
  /// Makes a world group over `store`; every rank of the world calls it. init_process_group
  /// uses it; programs that manage groups themselves (or run several worlds in one process,
  /// as in-process tests do) may call it directly.
  static std::shared_ptr<ProcessGroup> create(std::shared_ptr<Store> store, int rank,
                                              int world_size, const InitOptions& options = {});
  explicit ProcessGroup(std::shared_ptr<detail::GroupState> state);
  ~ProcessGroup();

  /// This process's rank in the group (-1 if not a member) and the group's size.
  int rank() const;
  int size() const;
  bool is_member() const { return rank() >= 0; }
  const std::string& backend() const;
  const std::string& name() const;
  std::chrono::milliseconds timeout() const;
  /// Global ranks of the members, in group-rank order.
  const std::vector<int>& ranks() const;
  /// Group rank of a global rank (InvalidArgument if not a member), and back.
  int group_rank(int global_rank) const;
  int global_rank(int group_rank) const;

  /// A subgroup of this group's world. Only the members need to call it (torch's
  /// use_local_synchronization); others may, and get a non-member handle. Members create
  /// their groups in the same order; disjoint groups may be created in any order.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& global_ranks,
                                          std::optional<std::chrono::milliseconds> timeout = {},
                                          const std::string& backend = "");

  /// Point-to-point, peers as group ranks. send/recv block (their Work is complete);
  /// isend/irecv return at once. A receive with src kAnySource takes the first message
  /// from any member; Work::source_rank() then says who sent it.
  std::shared_ptr<Work> send(const Tensor& tensor, int dst, int tag = 0);
  std::shared_ptr<Work> recv(const Tensor& tensor, int src = kAnySource, int tag = 0);
  std::shared_ptr<Work> isend(const Tensor& tensor, int dst, int tag = 0);
  std::shared_ptr<Work> irecv(const Tensor& tensor, int src = kAnySource, int tag = 0);

  // Collectives (docs/collectives.md; declared with the free functions in
  // tpcomm/collectives.hpp). Every member calls the same ones in the same order; roots are
  // group ranks. Arguments are checked before any communication (InvalidArgument).

  /// Copies `tensor` of rank `src` into `tensor` on every rank.
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int src, const CollectiveOptions& o = {});
  /// In place: `tensor` = op over ranks of `tensor`.
  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::SUM,
                                   const CollectiveOptions& o = {});
  /// In place on `dst`: `tensor` = op over ranks; other ranks' tensors are unchanged.
  std::shared_ptr<Work> reduce(const Tensor& tensor, int dst, ReduceOp op = ReduceOp::SUM,
                               const CollectiveOptions& o = {});
  /// output_list[i] = rank i's `input` (one tensor per rank, each like `input`).
  std::shared_ptr<Work> all_gather(const std::vector<Tensor>& output_list, const Tensor& input,
                                   const CollectiveOptions& o = {});
  /// `output` (size() x input.numel) = the inputs in rank order.
  std::shared_ptr<Work> all_gather_into_tensor(const Tensor& output, const Tensor& input,
                                               const CollectiveOptions& o = {});
  /// On `dst`: gather_list[i] = rank i's `input` (gather_list is ignored elsewhere).
  std::shared_ptr<Work> gather(const Tensor& input, const std::vector<Tensor>& gather_list,
                               int dst, const CollectiveOptions& o = {});
  /// `output` = scatter_list[rank] of rank `src` (scatter_list is ignored elsewhere).
  std::shared_ptr<Work> scatter(const Tensor& output, const std::vector<Tensor>& scatter_list,
                                int src, const CollectiveOptions& o = {});
  /// `output` = op over ranks of their input_list[rank].
  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const std::vector<Tensor>& input_list,
                                       ReduceOp op = ReduceOp::SUM,
                                       const CollectiveOptions& o = {});
  /// `output` = block `rank` of op over ranks of `input` (size() x output.numel).
  std::shared_ptr<Work> reduce_scatter_tensor(const Tensor& output, const Tensor& input,
                                              ReduceOp op = ReduceOp::SUM,
                                              const CollectiveOptions& o = {});
  /// output_list[i] = rank i's input_list[rank]; sizes may differ per peer but must agree
  /// between the two ends (MismatchError on every rank otherwise).
  std::shared_ptr<Work> all_to_all(const std::vector<Tensor>& output_list,
                                   const std::vector<Tensor>& input_list,
                                   const CollectiveOptions& o = {});
  /// Block j of `input` goes to rank j, which stores it as its block `rank`. Split sizes are
  /// element counts per rank; empty: even blocks. Mismatched splits: MismatchError on every
  /// rank, before any data moves.
  std::shared_ptr<Work> all_to_all_single(const Tensor& output, const Tensor& input,
                                          const std::vector<int64_t>& output_split_sizes = {},
                                          const std::vector<int64_t>& input_split_sizes = {},
                                          const CollectiveOptions& o = {});
  /// Returns once every member has entered it.
  std::shared_ptr<Work> barrier(const CollectiveOptions& o = {});

  /// Fails pending operations with AbortedError and refuses later calls. The world group's
  /// destroy also closes every connection.
  void destroy();
  bool is_destroyed() const;

  /// Internal state, for the library's own collectives.
  detail::GroupState& state() const { return *state_; }

 private:
  std::shared_ptr<detail::GroupState> state_;
};

/// Starts the default group (the world). Throws when already initialized.
void init_process_group(const InitOptions& options = {});
/// Destroys `group`, or the world and every group (null).
void destroy_process_group(const std::shared_ptr<ProcessGroup>& group = nullptr);
bool is_initialized();
/// The default (world) group; InvalidArgument when not initialized.
std::shared_ptr<ProcessGroup> default_group();

bool is_available();
bool is_nccl_available();
bool is_gloo_available();
bool is_mpi_available();
bool is_ucx_available();
bool is_ibverbs_available();

/// Rank in `group` (-1 if not a member), size, backend name; group null = the world.
int get_rank(const std::shared_ptr<ProcessGroup>& group = nullptr);
int get_world_size(const std::shared_ptr<ProcessGroup>& group = nullptr);
std::string get_backend(const std::shared_ptr<ProcessGroup>& group = nullptr);

/// A subgroup of the world (ranks empty: all). See ProcessGroup::new_group.
std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks = {},
                                        std::optional<std::chrono::milliseconds> timeout = {},
                                        const std::string& backend = "");
int get_group_rank(const std::shared_ptr<ProcessGroup>& group, int global_rank);
int get_global_rank(const std::shared_ptr<ProcessGroup>& group, int group_rank);
std::vector<int> get_process_group_ranks(const std::shared_ptr<ProcessGroup>& group);

/// Point-to-point with global ranks. send returns a completed Work; recv returns the
/// sender's global rank.
std::shared_ptr<Work> send(const Tensor& tensor, int dst,
                           const std::shared_ptr<ProcessGroup>& group = nullptr, int tag = 0);
int recv(const Tensor& tensor, int src = kAnySource,
         const std::shared_ptr<ProcessGroup>& group = nullptr, int tag = 0);
std::shared_ptr<Work> isend(const Tensor& tensor, int dst,
                            const std::shared_ptr<ProcessGroup>& group = nullptr, int tag = 0);
std::shared_ptr<Work> irecv(const Tensor& tensor, int src = kAnySource,
                            const std::shared_ptr<ProcessGroup>& group = nullptr, int tag = 0);

/// One operation of batch_isend_irecv: P2POp(isend, tensor, peer) as in torch (or the
/// Kind enum). The peer is a global rank.
struct P2POp {
  enum class Kind { Send, Recv };
  using Func = std::shared_ptr<Work> (*)(const Tensor&, int, const std::shared_ptr<ProcessGroup>&,
                                         int);
  P2POp(Kind kind, const Tensor& tensor, int peer, std::shared_ptr<ProcessGroup> group = nullptr,
        int tag = 0)
      : kind(kind), tensor(tensor), peer(peer), group(std::move(group)), tag(tag) {}
  /// `op` is tpcomm::isend or tpcomm::irecv.
  P2POp(Func op, const Tensor& tensor, int peer, std::shared_ptr<ProcessGroup> group = nullptr,
        int tag = 0);
  Kind kind;
  Tensor tensor;
  int peer;
  std::shared_ptr<ProcessGroup> group;
  int tag;
};

/// Posts every operation (all validated first: nothing is posted when one is invalid) and
/// returns their Works in order.
std::vector<std::shared_ptr<Work>> batch_isend_irecv(const std::vector<P2POp>& ops);

}  // namespace tpcomm
