// The loopback verbs test device: a shared library, libtpcomm_fake_verbs.so, with
// the libibverbs entry points the ibverbs transport loads, so that the transport runs end to
// end on machines without an RDMA device (TPCOMM_IBVERBS_LIB=<bin>/libtpcomm_fake_verbs.so).
//
// Model. One device "tpfake0" (tpfake_set_device_count: up to 4, tpfake0..3) with one RoCE port
// (link layer Ethernet, active MTU 1024, GIDs: 0 RoCE v1 link-local, 1 RoCE v2 IPv4-mapped, 2 RoCE
// v2 IPv6; all unique per process and context). Every RC QP owns a shared-memory segment
// (/dev/shm/tpfake-qp-<qpn>) holding a packet ring that only its connected peer writes; the peer
// opens it at RTR (by dest_qp_num) and marks it attached, and the owner then unlinks the name (only
// owners unlink, so a name reused by a new QP elsewhere is never removed by mistake); no name
// outlives a connection whose ends both ran. Each opened context runs one "HCA" thread that drains
// the rings of its QPs, checks and writes incoming data into registered memory (one-sided: the
// target's application threads are not involved), posts completions and returns ACK/NAK packets; it
// sleeps on an abstract Unix datagram socket that senders ring. Posts execute in the caller's
// thread.
//
// Strict where hardware is: the QP state machine with the attribute masks of ibv_modify_qp(3)
// per transition; posts refused (EINVAL) before RTS (send) or in RESET (receive); queue depth
// and SGE limits (ENOMEM/EINVAL); lkeys (protection domain, bounds) -> IBV_WC_LOC_PROT_ERR;
// rkeys (protection domain, IBV_ACCESS_REMOTE_WRITE on region and QP, bounds) ->
// IBV_WC_REM_ACCESS_ERR; a send longer than the posted receive -> IBV_WC_REM_INV_REQ_ERR;
// receive-not-ready waits min_rnr_timer per attempt and fails with IBV_WC_RNR_RETRY_EXC_ERR
// after rnr_retry attempts (7: forever); PSN mismatch or a wrong destination GID ->
// IBV_WC_RETRY_EXC_ERR after timeout * (retry_cnt + 1), as does a peer that died (its HCA
// thread stops beating); completions in posting order per QP, unsignaled ones suppressed;
// errors flush the remaining work with IBV_WC_WR_FLUSH_ERR; a full CQ overruns: poll_cq fails
// from then on and the QPs using it go to the error state.
//
// What it cannot show: timing, bandwidth, congestion, PFC/ECN, packet loss and real retries,
// real HCA quirks (inline limits, WQE sizes, doorbell batching, memory ordering of the PCIe
// path, page pinning and fork behaviour), InfiniBand LIDs and subnet managers (RoCE only),
// RDMA read and atomics (refused), shared receive queues (refused), async events.
#pragma once

#include <cstdint>

extern "C" {
/// Test hook: moves QP `qpn` of this process (0: every QP) to the error state, as a fatal
/// HCA error would. Returns the number of QPs moved.
int tpfake_force_qp_error(uint32_t qpn);
/// Test hook: the port state ibv_query_port reports (IBV_PORT_ACTIVE by default); while it is
/// not ACTIVE, packets sent by this process are lost (senders then see retry-exceeded).
void tpfake_set_port_state(int state);

/// Per-device counters of this process (test hooks for multi-rail, the registration cache and
/// the address vector). Bytes and work requests are counted at ibv_post_send.
struct tpfake_stats {
  uint64_t tx_bytes;       ///< payload bytes posted (sends and RDMA writes)
  uint64_t tx_wrs;         ///< send work requests posted
  uint64_t reg_mr;         ///< ibv_reg_mr calls that succeeded
  uint64_t dereg_mr;       ///< ibv_dereg_mr calls
  uint64_t live_mrs;       ///< registered now
  int last_traffic_class;  ///< ah_attr.grh.traffic_class of the last QP moved to RTR (-1 none)
  int last_sl;             ///< ah_attr.sl of the last QP moved to RTR (-1 none)
  int fork_init;           ///< 1 once ibv_fork_init was called in this process
};
/// Test hook: how many devices ibv_get_device_list lists (1 to 4: tpfake0..tpfake3, each its
/// own contexts, GIDs and HCA thread). Call before the transport lists devices. 0 or EINVAL.
int tpfake_set_device_count(int n);
/// Test hook: the counters of `device` ("tpfake1"); 0, or EINVAL for an unknown name.
int tpfake_get_stats(const char* device, tpfake_stats* out);
/// Test hook: zeroes every device's counters (live_mrs is kept).
void tpfake_reset_stats();
/// Test hook: moves every QP of this process on `device` to the error state (one NIC failing).
/// Returns the number of QPs moved, -1 for an unknown name.
int tpfake_force_device_error(const char* device);
/// rdma-core's ibv_fork_init: here it only records that it was called (tpfake_stats::fork_init).
int ibv_fork_init(void);
}
