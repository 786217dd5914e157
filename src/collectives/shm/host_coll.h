// Intra-host collectives by direct reads of shared memory (catalogue name "shm_direct").
// Every rank of a group on one host owns a shared segment that all of them map: ranks copy
// their input in once, read and reduce straight from each other's staging buffers with the
// vectorized kernels, and copy the result out once; sequence-numbered flags (acquire/release,
// one per cache line) replace messages. Small messages travel as one flag+payload line per
// rank. Waits spin briefly, then yield, then sleep on a futex, so that more ranks than cores
// still progress; every wait is bounded by the call's deadline.
//
// The process group tries HostColl first when all its ranks share a host; a call it does not
// handle returns false and runs on the message-passing algorithms of src/collectives.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/args.h"
#include "collectives/select.h"
#include "collectives/shm/tiny.h"
#include "collectives/types.h"
#include "core/deadline.h"
#include "core/liveness.h"
#include "tpcomm/store.hpp"

namespace tpcomm::coll::shm {

class Team;
class MappedSegment;

/// The direct-read collectives of one group on one host. Not thread-safe: one collective at
/// a time per instance (the process group's collective thread), called in the same order on
/// every rank.
class HostColl {
 public:
  /// Every member of the group calls it (collective); all must be on one host. Creates this
  /// rank's segment (an anonymous memfd of TPCOMM_SHM_COLL_BYTES plus control lines),
  /// publishes it through `group_store` and maps every peer's. Either every rank gets an
  /// instance or every rank throws (TransportError naming the rank and the reason, e.g. a peer
  /// on another host); the caller then keeps to message passing.
  /// With `live.watch` (the job's liveness watch, `live.ranks` the members' ranks in it), a
  /// member that died or stopped fails the set-up and every later wait on it within
  /// Team::kWatchPeriod with a PeerError naming it, instead of at the deadline.
  struct Liveness {
    std::shared_ptr<PeerWatch> watch;
    std::vector<int> ranks;
  };
  static std::unique_ptr<HostColl> create(Store& group_store, int rank, int size, Deadline dl,
                                          const Liveness& live = {});
  ~HostColl();
  HostColl(const HostColl&) = delete;
  HostColl& operator=(const HostColl&) = delete;

  // Each returns false, having done nothing, for a call it does not handle (an algorithm
  // other than shm_direct forced through the options or TPCOMM_ALGO); true once the result
  // is in place. Arguments must have been validated (src/collectives/validate.h). A wait past
  // `dl` throws TimeoutError naming the ranks that did not arrive; the instance is then
  // unusable (later calls throw Error) because the ranks' steps no longer agree.
  bool all_reduce(const AllReduceArgs& args, Deadline dl);
  bool broadcast(const BroadcastArgs& args, Deadline dl);
  bool all_gather(const AllGatherArgs& args, Deadline dl);
  bool reduce_scatter(const ReduceScatterArgs& args, Deadline dl);
  bool reduce(const ReduceArgs& args, Deadline dl);
  bool barrier(Deadline dl);

  /// The 8-byte all_reduce of a training loop (its loss or a counter): whether all_reduce_tiny()
  /// takes a SUM of `numel` elements of `dtype`, a few bytes of float32, float64, int32 or
  /// int64 per rank, with no algorithm named in TPCOMM_ALGO. Inline: the process group's fast
  /// lane asks before it starts the call.
  bool takes_tiny(DType dtype, int64_t numel, ReduceOp op) const {
    if (op != ReduceOp::SUM || numel <= 0) return false;
    const size_t es = tiny_sum_elem_size(dtype);
    return es != 0 && static_cast<uint64_t>(numel) * es <= tiny_max_bytes_;
  }
  /// all_reduce() of a call takes_tiny() accepted (validated arguments, `out` has `in`'s
  /// element count and dtype, no options): the same steps and bits, without the general
  /// call's work. Throws as all_reduce() does.
  void all_reduce_tiny(const Tensor& in, void* out, ReduceOp op, Deadline dl);

  /// Whether large broadcast and all_gather read straight from their owners' tensors (single
  /// copy, TPCOMM_SHM_COLL_CMA); when not, why (the first refusal, e.g. a seccomp profile or
  /// ptrace rules refusing process_vm_readv), logged once at creation.
  bool single_copy() const { return single_copy_note_.empty(); }
  const std::string& single_copy_note() const { return single_copy_note_; }

  /// Catalogue entry of the algorithm that ran last ("shm_direct" of its operation).
  const AlgoInfo& last_algo() const { return *last_; }
  int rank() const;
  int size() const;

 private:
  HostColl() = default;
  // Declines (false) or starts a call: its deadline, and what this rank called (`t`: the
  // tensor whose dtype and element count every rank must agree on; root and reduce op or -1).
  bool begin(CollOp op, uint64_t bytes, const CommonOptions& options, Deadline dl, const Tensor& t,
             int root, int redop);
  // The Error of a call after a timeout left the ranks' steps apart.
  [[noreturn]] void throw_broken(CollOp op) const;
  // The call's deadline and signature to the team, once it is known to run here.
  void start(CollOp op, Deadline dl, const Tensor& t, int root, int redop);

  std::vector<MappedSegment> segments_;
  std::unique_ptr<Team> team_;
  std::vector<AlgoRule> rules_;  // TPCOMM_ALGO as it was at create()
  const AlgoInfo* last_ = nullptr;
  const AlgoInfo* algo_of_[kNumCollOps] = {};  // shm_catalogue(op)[0], per CollOp
  std::string single_copy_note_;               // "" when single-copy reads are on
  uint64_t tiny_max_bytes_ = 0;  // takes_tiny()'s bound: 0 when TPCOMM_ALGO names algorithms
};

}  // namespace tpcomm::coll::shm
