// The link layer (DESIGN.md principle 1): a Transport registers memory, connects endpoints to
// peers and reaps completions in progress(). The protocol above it (eager, rendezvous,
// matching, credits) is written once, in src/p2p/. docs/transport.md maps ibverbs and UCX
// onto this interface call by call.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tpcomm/store.hpp"
#include "tpcomm/transport/endpoint.hpp"
#include "tpcomm/transport/memory.hpp"
#include "tpcomm/types.hpp"

namespace tpcomm::transport {

/// Which peers a transport can reach: those on this host only (shm), or any (tcp, ibverbs).
enum class Reach : uint8_t { Host, Network };

/// What a transport can do and what it costs (STYLE 5). Link selection and the protocol read
/// it; the defaults describe a plain network transport with emulated put.
struct Capabilities {
  Reach reach = Reach::Network;
  /// Put moves data without the receiving CPU (RDMA, CMA, mapped segment); false: emulated
  /// by a header plus a stream write into the posted buffer (tcp, UCX over tcp).
  bool native_put = false;
  bool native_get = false;
  /// Largest send() payload (one bounce buffer).
  size_t max_message = 8192;
  /// Largest single put; the protocol splits larger transfers.
  size_t max_put = SIZE_MAX;
  /// > 0: the peer pre-posts this many bounce buffers per connection and the protocol runs
  /// credit-based flow control (ibverbs). 0: the transport applies its own back-pressure
  /// (ring full, socket buffer full) by returning NoResource.
  uint32_t recv_slots = 0;
  /// Suggested eager/rendezvous switch point (TPCOMM_RNDV_THRESHOLD overrides it).
  size_t rndv_threshold = 65536;
  /// Hints for selection and tpinfo: one-way small-message latency and peak bandwidth.
  double latency_us = 10.0;
  double bandwidth_gbps = 1.0;
  /// Memory register_memory accepts besides host memory.
  bool cuda_memory = false;
  /// The transport matches large messages itself (UCX's tag matching, with its own
  /// rendezvous): Endpoint::send_tagged, Transport::recv_tagged and discard_tagged exist, and
  /// the protocol sends a rendezvous message's data right after its RTS instead of waiting for
  /// a CTS (docs/transport.md). false (ibverbs, tcp, shm): RTS -> CTS -> put.
  bool tagged_data = false;
  /// With tagged_data: the largest message sent that way; larger ones keep RTS -> CTS -> put
  /// (where the transport measured that path faster for them).
  size_t tagged_data_max = SIZE_MAX;
  /// With tagged_data: Endpoint::send_tagged_with_message exists (the protocol's RTS travels
  /// with its data, one transfer instead of two). Only for transports without credits
  /// (recv_slots == 0): the message arrives in no fixed order with the others.
  bool tagged_data_with_message = false;
  /// Every progress() round makes a system call (a socket poll: UCX over tcp). A spinning wait
  /// then does not pause after a round that found nothing: the pause keeps a poll of shared
  /// memory off the cache line the peer is writing, and a system call already does that.
  bool progress_is_syscall = false;
};

/// What a transport is created with. The store is private to the transport (prefixed), for
/// transports that exchange more than their address at connection time.
struct TransportContext {
  int rank = -1;
  int world_size = 0;
  std::string job_id;
  std::string host_id;
  std::shared_ptr<Store> store;
  std::chrono::milliseconds timeout{300000};
};

/// One instance per process and transport kind, driving every endpoint of that kind. Not
/// thread-safe: the protocol engine serialises calls (progress and posts alike).
class Transport {
 public:
  virtual ~Transport() = default;

  /// Registered name ("tcp", "shm", "ucx", "ibverbs").
  virtual const char* name() const = 0;
  virtual Capabilities capabilities() const = 0;

  /// Opaque bytes that let a peer connect to this process (listening addresses, a UCX worker
  /// address, a GID and LID); published through the store by the protocol engine.
  virtual std::vector<uint8_t> address() const = 0;

  /// The endpoint to `peer`, whose address() is `peer_address`; made on the first call,
  /// the same one afterwards (also when the peer connected first). Must not wait for the
  /// peer's progress(), which may itself be inside connect(): a handshake that needs the
  /// peer finishes in progress(), and posts return NoResource until then. A connection not
  /// ready by `deadline` is reported through on_peer_error. Throws TransportError when the
  /// address is unusable.
  virtual Endpoint& connect(int peer, std::span<const uint8_t> peer_address,
                            std::chrono::steady_clock::time_point deadline) = 0;

  /// Registers [addr, addr+length) on `device`; NotSupportedError for memory the transport
  /// cannot reach (see Capabilities::cuda_memory). length 0 is allowed.
  virtual std::unique_ptr<MemoryRegion> register_memory(void* addr, size_t length,
                                                        Device device) = 0;

  /// Allocates `length` bytes of memory that the transport owns, registered, and frees them
  /// when the region is destroyed (ucp_mem_map ALLOCATE; compare ncclMemAlloc). Where the
  /// transport can place it so that a peer maps it (UCX over shared memory: a sysv or posix
  /// segment), a put into it is the peer's own memcpy instead of a message the owner's CPU
  /// receives: one-sided and cache-speed. The default: page-aligned private pages
  /// (zero-filled), then register_memory. Its contents are unspecified where the transport
  /// allocates them. length 0 is allowed (no memory); NotSupportedError for a device the
  /// transport cannot allocate on.
  virtual std::unique_ptr<MemoryRegion> allocate_memory(size_t length, Device device);

  /// Reaps arrivals and completions and reports them to `sink`; advances queued sends and
  /// handshakes. Never blocks. Returns the number of events reported (0: nothing happened).
  virtual int progress(EventSink& sink) = 0;

  /// A file descriptor that polls readable when progress() may have work, for the blocking
  /// phase of the adaptive wait (an epoll fd over sockets, a CQ completion channel, a
  /// doorbell socket, ucp_worker_get_efd). -1: none, the caller polls with a short sleep.
  virtual int wait_fd() const { return -1; }

  /// Called before sleeping on wait_fd(): requests a wake-up for the next event
  /// (ibv_req_notify_cq, ucp_worker_arm, "doorbell wanted" flags). Returns false when work
  /// is already pending, in which case the caller runs progress() instead of sleeping.
  virtual bool arm() { return true; }

  /// True while progress() is moving the bytes of a transfer chunk after chunk (UCX over
  /// tcp: a transfer runs and UCX moved something since this method's last call, or within
  /// half a millisecond of the call that last saw it move). A wait past its spin then keeps
  /// polling without yielding (for 100 ms at most) instead of yielding and blocking: handing a
  /// stream to the progress thread and back on every completion costs ~7% of 1 MiB bandwidth
  /// at a window of 32, and a yield under another process's load loses the core for its
  /// slice. Called under the caller's serialization.
  virtual bool transferring() { return false; }

  /// True when a post left work that only a later progress() (or arm()) finishes, such as a
  /// doorbell check deferred off the send path. Called under the caller's serialization after
  /// posts; the caller then makes sure progress() runs soon even if nobody waits.
  virtual bool needs_progress() const { return false; }

  /// Lock-free hint for a spinning waiter: false only when progress() would surely find
  /// nothing new (no arrival, no completion, no queued work). Unlike every other method it may
  /// be called from any thread at the same time as progress() and posts on another thread,
  /// so an implementation reads only atomics whose memory stays valid for the transport's
  /// life. A false answer that turns true later costs the caller one more check; a true
  /// answer costs it one progress(). The default (true) always sends the caller to progress().
  virtual bool maybe_pending() const noexcept { return true; }

  /// With Capabilities::tagged_data: receives the tagged data that `peer` sends under `id`
  /// (Endpoint::send_tagged) straight into [offset, offset+length) of `dst`, whether it
  /// arrived already (the transport holds unexpected data) or comes later. When every byte is
  /// there the sink gets on_put_arrived(peer, imm). Data of another length, or a receive that
  /// cannot be posted, is reported through on_peer_error(peer). Destroying `dst` withdraws a
  /// receive still aimed at it. Never NoResource: receives are not flow-controlled.
  virtual void recv_tagged(int /*peer*/, uint64_t /*id*/, const MemoryRegion& /*dst*/,
                           size_t /*offset*/, size_t /*length*/, uint32_t /*imm*/) {
    throw NotSupportedError("this transport does not match tagged data itself");
  }

  /// With Capabilities::tagged_data: drops the tagged data `peer` sends under `id` (a refused
  /// or abandoned rendezvous message), so that it neither stays held here nor keeps the
  /// sender's send from completing. No event.
  virtual void discard_tagged(int /*peer*/, uint64_t /*id*/) {
    throw NotSupportedError("this transport does not match tagged data itself");
  }
};

/// Creates a transport; throws NotSupportedError (with the reason) where it cannot run here,
/// for example no RDMA device.
using TransportFactory = std::function<std::unique_ptr<Transport>(const TransportContext&)>;

/// Registers a transport by name (STYLE 2). Each transports/<name>/ folder calls this from
/// its registration function, which the build lists in register_builtin_transports.cc; no
/// core file names a transport. Registering a name again replaces it (tests use this).
void register_transport(const std::string& name, TransportFactory factory);

/// Names of the registered transports, sorted.
std::vector<std::string> transport_names();

/// True when `name` is registered (compiled in); it may still fail to start here.
bool has_transport(const std::string& name);

/// Creates the transport `name`; InvalidArgument listing the known names when unknown.
std::unique_ptr<Transport> create_transport(const std::string& name, const TransportContext& ctx);

/// Runs every built-in transport's registration (once; also done when the library loads).
void register_builtin_transports();

}  // namespace tpcomm::transport
