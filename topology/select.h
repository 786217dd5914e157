// Per-link selection: which transport joins two ranks, on which NIC, with GPUDirect or not,
// and why. Everything here is a pure function of plain values, so both ends of a link compute
// the same answer from the two published summaries without talking, and the rules are tested
// on stored machines (shared/topologies/).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "topology/topology.h"

namespace tpcomm::topo {

// ---- NIC filtering and choice (nic_choice.cc) ----------------------------------------------

/// TPCOMM_IB_HCA, in NCCL_IB_HCA syntax: "mlx5_0,mlx5_1" (name prefixes: "mlx5_1" also
/// matches mlx5_10), a leading "^" excludes the listed devices, a leading "=" (after any "^")
/// asks for exact names, and "name:port" restricts to one port.
struct HcaFilter {
  struct Entry {
    std::string name;
    int port = -1;  ///< -1: every port
    bool operator==(const Entry&) const = default;
  };
  bool exclude = false;
  bool exact = false;
  std::vector<Entry> entries;

  bool empty() const { return entries.empty(); }
  /// True when port `port` of device `nic` may be used (port -1: the device as a whole,
  /// i.e. some port of it may).
  bool allows(std::string_view nic, int port) const;
  bool operator==(const HcaFilter&) const = default;
};

/// Parses a TPCOMM_IB_HCA value; throws ConfigError naming the variable and the bad part.
HcaFilter parse_ib_hca(std::string_view spec);

/// Parses TPCOMM_NET_GDR_LEVEL: loc, pix, pxb, phb, node, sys (any case) or NCCL's integers
/// 0 loc, 1 pix, 2 pxb, 3 phb, 4 and above sys. Throws ConfigError otherwise.
Relation parse_gdr_level(std::string_view s);

/// What the NIC choice depends on besides the hardware.
struct NicOptions {
  HcaFilter hca;
  Relation gdr_level = Relation::PXB;  ///< GPUDirect when relation <= level; LOC: never
  std::string hca_text;                ///< the TPCOMM_IB_HCA value, for messages
  /// From TPCOMM_IB_HCA and TPCOMM_NET_GDR_LEVEL.
  static NicOptions from_config();
};

/// The NIC chosen for one buffer location (a GPU, or the NUMA node of host memory).
struct NicPick {
  std::string nic;  ///< "" when no RDMA device is usable
  int port = -1;
  std::string kind;  ///< Nic::kind of the chosen device
  Relation relation = Relation::SYS;
  bool gdr = false;  ///< GPU buffers: GPUDirect RDMA allowed by the topology and the level
  std::string why;   ///< how it was chosen, for logs and tpinfo
  std::string gdr_why;
  bool operator==(const NicPick&) const = default;
};

/// True when `gpu` and a NIC at `rel` may use GPUDirect under `level`; `why` explains.
bool gdr_allowed(const Gpu& gpu, const Nic& nic, Relation rel, Relation level, std::string* why);

/// The NIC for buffers on `gpu`: the nearest usable device (verbs-capable ones first, ports
/// active and allowed by TPCOMM_IB_HCA); among devices at equal distance, GPUs that share
/// the same set are spread over it in GPU order (rail alignment).
NicPick pick_nic_for_gpu(const Topology& t, const Gpu& gpu, const NicOptions& opts);

/// The NIC for host memory on NUMA node `numa` (-1: not bound): nearest first, ranks of a host
/// spread over devices at equal distance by `local_rank`.
NicPick pick_nic_for_numa(const Topology& t, int numa, int local_rank, const NicOptions& opts);

// ---- per-rank summary (summary.cc) ---------------------------------------------------------

/// Where one rank lives: what make_summary needs besides the machine.
struct Placement {
  int rank = -1;
  int local_rank = 0;
  int numa = -1;    ///< NUMA node it is bound to; -1 not bound to one node
  std::string gpu;  ///< bus id or label ("cuda0") of the GPU it uses; "" none
};

/// This process's placement: NUMA node from its CPU affinity (read only; nothing is bound).
Placement current_placement(const Topology& t, int rank, int local_rank, std::string gpu);

/// What each rank publishes through the store: host identity, the host's GPUs and RDMA NICs
/// with PCI paths, where the rank sits, the NICs it chose (with its own TPCOMM_IB_HCA and
/// TPCOMM_NET_GDR_LEVEL) and the transports it can use.
struct Summary {
  int rank = -1;
  int local_rank = 0;
  std::string host_id;
  int numa_count = 0;
  int numa = -1;
  std::string gpu;  ///< bus id of the rank's GPU; "" none
  std::vector<Gpu> gpus;
  std::vector<Nic> nics;
  NicPick host_nic;                     ///< for host memory
  NicPick gpu_nic;                      ///< for the rank's GPU memory (empty nic when no GPU)
  std::vector<std::string> transports;  ///< usable here; empty means not restricted

  const Gpu* my_gpu() const;
  bool operator==(const Summary&) const = default;
};

/// Builds the summary of a rank at `p` on machine `t`. Throws InvalidArgument when p.gpu names
/// no GPU of t.
Summary make_summary(const Topology& t, const Placement& p, const NicOptions& opts,
                     std::vector<std::string> transports);

/// The summary of this process on `t`: placement from its CPU affinity, NIC options from
/// TPCOMM_IB_HCA and TPCOMM_NET_GDR_LEVEL, `transports` as given (usable_transports() of the
/// probes, restricted to the transports the caller has).
Summary local_summary(const Topology& t, int rank, int local_rank, std::string gpu,
                      std::vector<std::string> transports);

/// Compact JSON of a summary (a few KiB at most); round-trips exactly.
std::string summary_to_string(const Summary& s);
/// Parses summary_to_string output from an untrusted source; throws InvalidArgument naming
/// `what` (e.g. "summary of rank 3") and the problem.
Summary summary_from_string(std::string_view text, std::string_view what = "topology summary");

// ---- link selection (select.cc) ------------------------------------------------------------

/// Which memory the link carries.
enum class Memory { Host, Device };

/// Options that force or exclude choices (TPCOMM_TRANSPORT, TPCOMM_SHM_DISABLE).
struct SelectOptions {
  std::vector<std::string> prefer;   ///< positive TPCOMM_TRANSPORT entries, in order
  std::vector<std::string> exclude;  ///< "^name" entries
  bool shm_disable = false;
  Memory memory = Memory::Host;
  /// From the registry; `m` is the memory the caller will move.
  static SelectOptions from_config(Memory m = Memory::Host);
};

/// The answer for one link, seen from `mine`.
struct LinkChoice {
  std::string transport;  ///< "shm", "ibverbs", "ucx", "tcp"; "" when nothing fits
  std::string nic;        ///< this rank's RDMA device (ibverbs), else ""
  int port = -1;
  bool gdr = false;  ///< this rank's GPU buffers go to the NIC directly
  std::string peer_nic;
  int peer_port = -1;
  bool peer_gdr = false;
  bool cuda_ipc = false;  ///< same host, GPU memory mapped across processes
  std::string reason;     ///< identical at both ends

  bool ok() const { return !transport.empty(); }
  bool operator==(const LinkChoice&) const = default;
};

/// The transport order tried when TPCOMM_TRANSPORT does not give one.
std::vector<std::string> default_transport_order(bool same_host);

/// Chooses the transport for the link between `mine` and `peer`. `available` lists the
/// transports built and usable in this process. Symmetric by construction: both ranks order
/// the pair the same way and decide on that order, so select_link(a, b) and select_link(b, a)
/// agree on transport and reason, and each side's NIC is the other's peer NIC.
LinkChoice select_link(const Summary& mine, const Summary& peer,
                       const std::vector<std::string>& available, const SelectOptions& opts);

/// One log line: "rank 0 -> rank 1: ibverbs on mlx5_0:1 (GPUDirect) ...: <reason>".
std::string describe(const Summary& mine, const Summary& peer, const LinkChoice& c);

}  // namespace tpcomm::topo
