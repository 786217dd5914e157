// The core's entries of the configuration registry (transports register their own).
// Keep each group sorted by name; tpinfo prints them all.
#include <span>
#include <string_view>
#include <utility>

#include "core/config.h"

namespace tpcomm::config {

namespace {
using T = Type;

// clang-format off
constexpr Param kParams[] = {
  // ---- logging and core ----
  {"TPCOMM_DEBUG", T::Enum, "none", "none|warn|info|trace",
   "Log level. trace is compiled in only with -DTPCOMM_ENABLE_TRACE=ON.", "core"},
  {"TPCOMM_DEBUG_FILE", T::String, "",  "",
   "Write the log to this file instead of stderr; %h is replaced by the host name, %p by the pid.",
   "core"},
  {"TPCOMM_DEBUG_SUBSYS", T::List, "all",
   "all|init|store|net|coll|topo|launch|env|shm|tcp|ucx|ibverbs|p2p|alloc|^init|^store|^net|^coll|^topo|^launch|^env|^shm|^tcp|^ucx|^ibverbs|^p2p|^alloc",
   "Subsystems to log, comma-separated; ^name excludes one (as NCCL_DEBUG_SUBSYS).", "core"},
  {"TPCOMM_BUFFSIZE", T::Size, "4M", "",
   "Size of each staging buffer used by pipelined protocols and collectives.", "core"},
  {"TPCOMM_HOSTID", T::String, "", "",
   "Host identity used to decide which ranks share a host (default: the machine's hostname and "
   "boot id). Ranks with different values are treated as different hosts.", "core"},
  {"TPCOMM_JOB_ID", T::String, "", "",
   "Job identifier carried in store and data-connection handshakes; connections of another job "
   "are refused. tprun sets it; default 'default'.", "core"},
  {"TPCOMM_TIMEOUT", T::Duration, "300s", "",
   "Default deadline of blocking operations (process-group and store calls).", "core"},
  {"TPCOMM_AUTH_SECRET", T::String, "", "",
   "Shared secret of the job: TCPStore and tcp data connections prove knowledge of it by "
   "challenge and "
   "response (HMAC-SHA256 over nonces from both sides; the secret never crosses the wire); a "
   "peer without it, or with another, is refused with an error on both sides. Empty: off.",
   "core"},
  {"TPCOMM_AUTH_SECRET_FILE", T::String, "", "",
   "File holding the shared secret (first line; used when TPCOMM_AUTH_SECRET is empty), so "
   "that it does not show in the process environment.", "core"},

  // ---- stores ----
  {"TPCOMM_STORE_BACKLOG", T::Int, "4096", "1..1048576",
   "listen() backlog of the TCPStore server.", "store"},
  {"TPCOMM_STORE_CONNECT_RETRY", T::Duration, "10ms", "",
   "Initial back-off between TCPStore connection attempts (doubles, capped at 1 s).", "store"},
  {"TPCOMM_STORE_HANDSHAKE_TIMEOUT", T::Duration, "5s", "",
   "How long the TCPStore server keeps a new connection that has not completed its handshake "
   "(a silent or half-written hello) before closing it; 0 waits forever.", "store"},
  {"TPCOMM_STORE_LOCAL_SOCKET", T::Bool, "1", "",
   "TCPStore clients on the server's host move to a Unix-domain socket after the TCP handshake "
   "(the server offers an abstract socket; much cheaper than loopback TCP). 0 keeps every "
   "client on TCP (set on the server, the client, or both).", "store"},
  {"TPCOMM_STORE_MAX_CLIENTS", T::Int, "65536", "1..1048576",
   "Most concurrent client connections a TCPStore server accepts; more are refused with an "
   "error reply.", "store"},
  {"TPCOMM_STORE_MAX_KEY", T::Size, "4K", "",
   "Longest key a store accepts; longer requests get an error reply.", "store"},
  {"TPCOMM_STORE_MAX_VALUE", T::Size, "256M", "",
   "Largest value (and largest request frame) a store accepts.", "store"},
  {"TPCOMM_STORE_SPIN", T::Duration, "50us", "",
   "How long a TCPStore client (and the server) busy-polls for a reply before sleeping in the "
   "kernel; 0 disables spinning.", "store"},

  // ---- launcher (tprun) ----
  {"TPCOMM_LAUNCH_GRACE", T::Duration, "5s", "",
   "tprun: time between SIGTERM and SIGKILL when stopping workers.", "launch"},
  {"TPCOMM_RESTART_COUNT", T::Int, "0", "0..",
   "Set by tprun for its workers: how many times the workers of this node were restarted "
   "after a failure (as TORCHELASTIC_RESTART_COUNT).", "launch"},
  {"TPCOMM_USE_AGENT_STORE", T::Bool, "0", "",
   "Set by tprun: the launcher hosts the TCPStore at MASTER_ADDR:MASTER_PORT, so every rank, "
   "rank 0 included, connects as a client.", "launch"},

  // ---- CUDA ----
  {"TPCOMM_CUDA_LIB", T::String, "libcuda.so.1", "",
   "The CUDA driver library, opened at run time on the first CUDA tensor (tpcomm links neither "
   "libcuda nor libcudart); tests name tpcomm's fake driver here.", "cuda"},

  // ---- topology and per-link selection ----
  {"TPCOMM_IB_HCA", T::String, "", "",
   "RDMA devices to use, NCCL_IB_HCA syntax: comma-separated name prefixes (mlx5 matches "
   "mlx5_0..mlx5_N), '=' first for exact names, '^' first to exclude the list, ':port' to pick "
   "one port (e.g. '=mlx5_0:1,mlx5_1:1', '^mlx5_3').", "topo"},
  {"TPCOMM_NET_GDR_LEVEL", T::Enum, "pxb", "loc|pix|pxb|phb|node|sys|0|1|2|3|4|5",
   "Farthest GPU-to-NIC relation at which GPUDirect RDMA is used (as NCCL_NET_GDR_LEVEL): "
   "loc never, pix same PCIe switch port, pxb same PCIe switch tree, phb same host bridge, "
   "node same socket, sys always; integers as NCCL's: 0 loc, 1 pix, 2 pxb, 3 phb, 4 or 5 sys.",
   "topo"},
  {"TPCOMM_SHM_DISABLE", T::Bool, "0", "",
   "Do not use shared memory between ranks of one host (they then use the network "
   "transports, as NCCL_SHM_DISABLE).", "topo"},
  {"TPCOMM_TOPO_DUMP_FILE", T::String, "", "",
   "Write the discovered topology to this file: hwloc XML when the name ends in .xml, else "
   "tpcomm's JSON; %h is replaced by the host name, %p by the pid.", "topo"},
  {"TPCOMM_TOPO_FILE", T::String, "", "",
   "Use this topology instead of discovering the machine: an hwloc XML export (v1 or v2, "
   "e.g. from lstopo --of xml) or a tpcomm JSON dump. Nothing is bound on the real machine.",
   "topo"},
  {"TPCOMM_TRANSPORT", T::List, "", "shm|tcp|ucx|ibverbs|^shm|^tcp|^ucx|^ibverbs",
   "Transports the per-link selection may use, in order of preference (e.g. 'tcp' forces TCP, "
   "'ucx,tcp'); '^name' excludes one. Empty: automatic (shm within a host; ibverbs, ucx, tcp "
   "between hosts).", "topo"},

  // ---- point-to-point protocol and progress ----
  {"TPCOMM_CONNECT", T::Enum, "lazy", "lazy|eager",
   "When connections are made: lazy on first use of a peer, or eager (all peers of the world "
   "at init_process_group, failing early when one is unreachable).", "p2p"},
  {"TPCOMM_RNDV_THRESHOLD", T::Size, "", "",
   "Messages larger than this use the rendezvous protocol (handshake, then a zero-copy put "
   "into the receive buffer); smaller ones are sent eagerly. Default: each transport's "
   "suggestion: shm its largest ring message (a quarter of TPCOMM_SHM_RING_SIZE, at most "
   "16K), tcp 64K, ibverbs 32K, ucx TPCOMM_UCX_RNDV_THRESHOLD.", "p2p"},
  {"TPCOMM_WAIT_SPIN_US", T::Int, "100", "0..10000000",
   "Adaptive wait: microseconds a waiting thread busy-polls before it starts yielding (2 "
   "when unset and LOCAL_WORLD_SIZE exceeds the host's cores, counted within the container's "
   "cgroup cpuset and CPU quota).", "p2p"},
  {"TPCOMM_WAIT_YIELD_US", T::Int, "2000", "0..10000000",
   "Adaptive wait: microseconds a waiting thread polls with sched_yield() after spinning, "
   "before it sleeps until the progress thread wakes it. While a transport is moving a transfer's "
   "bytes (UCX over tcp) the wait polls on without yielding, for 100 ms at most. 0: sleep right "
   "after spinning.", "p2p"},
  {"TPCOMM_HEARTBEAT_INTERVAL", T::Duration, "1s", "",
   "Dead-peer detection: how often the engine sends a small heartbeat on each connected link "
   "(from the progress thread, never on the data path); 0 turns heartbeats off.", "p2p"},
  {"TPCOMM_HEARTBEAT_TIMEOUT", T::Duration, "10s", "",
   "A peer on another host that sends nothing, not even a heartbeat, for this long (stopped, "
   "hung, or cut off; needs TPCOMM_HEARTBEAT_INTERVAL > 0), or a peer on this host whose "
   "process stays stopped this long (SIGSTOP, a debugger), is declared unresponsive: every "
   "operation and collective waiting on it fails naming its rank and host. 0: never. A peer "
   "on this host that exits is declared dead at once (pidfd).", "p2p"},

  // ---- collectives ----
  {"TPCOMM_ALGO", T::String, "", "",
   "Forces collective algorithms: rules 'op:algorithm' or 'op:min-max:algorithm' (sizes "
   "inclusive, either end may be empty) separated by ';', first match wins, e.g. "
   "'allreduce:0-64k:recursive_doubling;allreduce:ring;broadcast:tree'. Ops: broadcast, "
   "allreduce, reduce, allgather, gather, scatter, reducescatter, alltoall, barrier; a rule "
   "naming an unknown algorithm fails with a ConfigError listing the op's algorithms "
   "(shm_direct, on one host, included). Unset: a cost model picks.", "collectives"},
  {"TPCOMM_CHECK_SIGNATURE", T::Bool, "1", "",
   "Collective signatures: each collective's message tags carry its operation code and a hash "
   "of dtype, element count, root and reduce op (on one host, shm_direct compares the calls "
   "published beside its step counters), so that ranks calling different collectives "
   "fail with a MismatchError naming both calls instead of mixing data or hanging. 0: off "
   "(for measuring its cost).", "collectives"},
  {"TPCOMM_FLIGHT_RECORDER", T::Int, "2048", "0..16777216",
   "Flight recorder: the last N collectives of each group (operation, sequence number, dtype, "
   "count, root, algorithm, state, times) kept in a ring (56 bytes an entry; rounded up to a "
   "power of two) and dumped to TPCOMM_FLIGHT_RECORDER_DIR when a collective fails with a "
   "timeout, a lost peer or a mismatch, and on SIGUSR1; tpinfo --trace DIR reads the dumps. "
   "0: off.", "collectives"},
  {"TPCOMM_FLIGHT_RECORDER_DIR", T::String, "", "",
   "Directory of the flight recorder's dumps (one file per rank, rank<N>.trace); default "
   "/tmp/tpcomm_trace_<TPCOMM_JOB_ID>.", "collectives"},
  {"TPCOMM_REDUCE_ISA", T::Enum, "auto", "auto|avx512fp16|avx512|avx2|scalar",
   "Instruction set of the host reduction kernels: auto picks the widest the CPU supports "
   "(avx512fp16 is avx512 plus the AVX512-FP16 and AVX512-BF16 extensions, used for float16 "
   "and bfloat16); a forced path the CPU lacks falls back to auto with a warning. Every path "
   "gives the same bits.",
   "collectives"},
  {"TPCOMM_REDUCE_NT_THRESHOLD", T::Size, "8M", "",
   "Out-of-place reductions writing at least this many bytes use non-temporal (streaming) "
   "stores: no read-for-ownership of the output (about 1.5x the bandwidth out of cache), but "
   "the result leaves the caches. The default stays above pipelined chunk sizes "
   "(TPCOMM_BUFFSIZE); 0 never streams.", "collectives"},
  {"TPCOMM_SHM_COLL_BYTES", T::Size, "8M", "",
   "Shared staging region of each rank for the intra-host direct-read collectives "
   "(shm_direct): three buffers used in turn; larger tensors are pipelined through them in "
   "chunks.", "collectives"},
  {"TPCOMM_SHM_COLL_CHUNK", T::Size, "2M", "",
   "Largest pipelining chunk of the shm_direct collectives (capped at a third of "
   "TPCOMM_SHM_COLL_BYTES; medium tensors use smaller chunks, about 8 per tensor); small "
   "enough to stay in the caches between the copy in and the peers' reads.", "collectives"},
  {"TPCOMM_SHM_COLL_CMA", T::Enum, "auto", "auto|on|off",
   "Single-copy shm_direct broadcast and all_gather: readers copy large blocks straight from "
   "their owner's tensor with process_vm_readv (cross-memory attach, probed toward every peer "
   "at creation; the group keeps the staging copies, logging why, when any rank is refused). "
   "auto: where it measured faster: whole blocks read directly up to 4 MiB, and above that a "
   "broadcast from a root out of place (readers read part of each round directly while the "
   "root copies it); on: every broadcast and all_gather block from TPCOMM_SHM_COLL_CMA_MIN up "
   "reads whole blocks directly; off: always through the staging buffers.",
   "collectives"},
  {"TPCOMM_SHM_COLL_CMA_MIN", T::Size, "32K", "",
   "Smallest block (all_gather: per rank; broadcast: the tensor) that shm_direct reads with a "
   "single cross-memory copy (TPCOMM_SHM_COLL_CMA); the group uses its ranks' largest value.",
   "collectives"},
  {"TPCOMM_SHM_COLL_STAGE_STORES", T::Enum, "auto", "auto|cached|streaming",
   "How a rank writes the staging chunks of a large shm_direct broadcast, all_gather or 2-rank "
   "all_reduce (from TPCOMM_REDUCE_NT_THRESHOLD) that its peers read next. cached: the peers fetch them from "
   "this core's caches (fastest where the cores share a cache); streaming: through memory "
   "(steady where cache-to-cache transfers are slow, as between vCPUs their host placed far "
   "apart); auto: times its own copies and uses the faster kind, trying the other now and then.",
   "collectives"},
  {"TPCOMM_SHM_COLL_STOP_AT", T::Int, "0", "0..",
   "Testing: this rank stops itself (SIGSTOP) on entering its N-th wait on a peer in the "
   "direct-read collectives (0: never), so that tests can stop a rank at every wait point.",
   "collectives"},
  {"TPCOMM_SHM_COLL_SPIN_US", T::Int, "10", "0..10000000",
   "shm_direct waits: microseconds of busy polling before polling with sched_yield (2 ms), "
   "then sleeping on a futex (cut to 2 us when the host's ranks outnumber its cores, within "
   "the container's cgroup limits). Short: "
   "a yield returns at once on an idle core, and lets a descheduled peer run on a busy one.",
   "collectives"},

  // ---- variables owned by others, read through the registry ----
  {"GROUP_RANK", T::Int, "", "0..", "Node rank, set by tprun for workers.", "launch", true},
  {"LOCAL_RANK", T::Int, "", "0..", "Rank within the node, set by tprun.", "launch", true},
  {"LOCAL_WORLD_SIZE", T::Int, "", "1..", "Ranks on this node, set by tprun.", "launch", true},
  {"MASTER_ADDR", T::String, "", "", "env:// rendezvous: host of the store server.",
   "launch", true},
  {"MASTER_PORT", T::Int, "", "0..65535", "env:// rendezvous: port of the store server.",
   "launch", true},
  {"OMPI_COMM_WORLD_LOCAL_RANK", T::Int, "", "0..", "Open MPI: local rank (tprun reads it).",
   "launch", true},
  {"OMPI_COMM_WORLD_RANK", T::Int, "", "0..", "Open MPI: rank (tprun reads it).", "launch",
   true},
  {"OMPI_COMM_WORLD_SIZE", T::Int, "", "1..", "Open MPI: world size (tprun reads it).",
   "launch", true},
  {"PATH", T::String, "", "", "Program search path; tprun looks up the worker program in it.",
   "launch", true},
  {"PMI_RANK", T::Int, "", "0..", "MPICH/PMI: rank.", "launch", true},
  {"PMI_SIZE", T::Int, "", "1..", "MPICH/PMI: world size.", "launch", true},
  {"RANK", T::Int, "", "0..", "env:// rendezvous: this process's global rank.", "launch", true},
  {"SLURM_JOB_ID", T::String, "", "", "Slurm: job id (tprun uses it as the default job id).",
   "launch", true},
  {"SLURM_NNODES", T::Int, "", "1..", "Slurm: number of nodes (tprun --nnodes default).",
   "launch", true},
  {"SLURM_NODEID", T::Int, "", "0..", "Slurm: node index (tprun --node-rank default).",
   "launch", true},
  {"SLURM_PROCID", T::Int, "", "0..", "Slurm: task rank.", "launch", true},
  {"WORLD_SIZE", T::Int, "", "1..", "env:// rendezvous: number of processes in the job.",
   "launch", true},
};
// clang-format on
}  // namespace

// NCCL_* variables users set by habit, and the TPCOMM_* variable that does that job here.
constexpr std::pair<std::string_view, std::string_view> kNccl[] = {
    {"NCCL_ALGO", "TPCOMM_ALGO"},
    {"NCCL_BUFFSIZE", "TPCOMM_BUFFSIZE"},
    {"NCCL_DEBUG", "TPCOMM_DEBUG"},
    {"NCCL_DEBUG_FILE", "TPCOMM_DEBUG_FILE"},
    {"NCCL_DEBUG_SUBSYS", "TPCOMM_DEBUG_SUBSYS"},
    {"NCCL_IB_GID_INDEX", "TPCOMM_IB_GID_INDEX"},
    {"NCCL_IB_HCA", "TPCOMM_IB_HCA"},
    {"NCCL_IB_QPS_PER_CONNECTION", "TPCOMM_IB_QPS_PER_CONNECTION"},
    {"NCCL_IB_RETRY_CNT", "TPCOMM_IB_RETRY_CNT"},
    {"NCCL_IB_SL", "TPCOMM_IB_SL"},
    {"NCCL_IB_TC", "TPCOMM_IB_TC"},
    {"NCCL_IB_TIMEOUT", "TPCOMM_IB_TIMEOUT"},
    {"NCCL_NET_GDR_LEVEL", "TPCOMM_NET_GDR_LEVEL"},
    {"NCCL_SHM_DISABLE", "TPCOMM_SHM_DISABLE"},
    {"NCCL_SOCKET_FAMILY", "TPCOMM_SOCKET_FAMILY"},
    {"NCCL_SOCKET_IFNAME", "TPCOMM_SOCKET_IFNAME"},
    {"NCCL_SOCKET_NTHREADS", "TPCOMM_SOCKET_NSOCKS"},
    {"NCCL_TOPO_DUMP_FILE", "TPCOMM_TOPO_DUMP_FILE"},
    {"NCCL_TOPO_FILE", "TPCOMM_TOPO_FILE"},
};

// Variables naming a file tpcomm reads: a file that cannot be read is an error at init.
constexpr std::string_view kFiles[] = {"TPCOMM_TOPO_FILE", "TPCOMM_AUTH_SECRET_FILE"};

std::span<const Param> core_params() { return kParams; }
std::span<const std::pair<std::string_view, std::string_view>> nccl_counterparts() { return kNccl; }
std::span<const std::string_view> file_params() { return kFiles; }

}  // namespace tpcomm::config
