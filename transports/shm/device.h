// The shm transport (DESIGN.md: peers on the same host). Messages travel through one
// lock-free SPSC ring per (sender, receiver) pair; a put is a single copy into the
// destination by process_vm_writev, or, where the ptrace rules forbid it, a pipelined copy
// through the ring. Rings live in unnamed tmpfs files passed by descriptor, so no name ever
// appears in /dev/shm. Each process listens on an abstract unix socket; a connection is a
// SEQPACKET socket per direction, carrying the handshake (magic, version, job id, ranks),
// the ring's descriptor and doorbells, and its end-of-stream reports a dead peer at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "net/socket.h"
#include "tpcomm/transport/transport.hpp"
#include "transports/shm/endpoint.h"
#include "transports/shm/memory_region.h"
#include "transports/shm/wire.h"

namespace tpcomm::transport::shm {

/// The TPCOMM_SHM_* settings, read once when the transport is made.
struct Settings {
  size_t ring_bytes = 256 * 1024;
  size_t max_message = 16 * 1024;
  bool cma = true;
  size_t put_chunk = 4 << 20;
  /// Puts of at least this many bytes are copied by both ends at once (0: never).
  size_t shared_min = 1 << 20;
  /// Staging area per direction: slots x chunk bytes (no area when stage_slots is 0).
  size_t stage_chunk = 1 << 20;
  uint32_t stage_slots = 4;
  /// With cross-memory access, puts below this size are not staged.
  size_t stage_min = 16 << 20;
  /// With cross-memory access, bytes a receiver pulls from a staged put's end per claim when
  /// no chunk is staged (0: it only drains).
  size_t stage_pull = 256 << 10;
  /// How staging chunks are written (TPCOMM_SHM_STAGE_STORES).
  StagePolicy::Mode stage_stores = StagePolicy::Mode::Auto;
  std::string dir = "/dev/shm";
  /// Reads the registry; throws ConfigError for unusable values.
  static Settings from_config();
};

class ShmTransport final : public Transport {
 public:
  ShmTransport(const TransportContext& ctx, const Settings& settings);
  ~ShmTransport() override;
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  const char* name() const override { return "shm"; }
  Capabilities capabilities() const override;
  std::vector<uint8_t> address() const override;
  Endpoint& connect(int peer, std::span<const uint8_t> peer_address,
                    std::chrono::steady_clock::time_point deadline) override;
  std::unique_ptr<MemoryRegion> register_memory(void* addr, size_t length, Device device) override;
  int progress(EventSink& sink) override;
  int wait_fd() const override { return epoll_.get(); }
  bool arm() override;
  bool needs_progress() const override { return !unfenced_.empty(); }
  /// False only while every attached ring is empty at its read position and nothing else
  /// (events, puts, handshakes, doorbell checks, lazy head publication, an armed sleep)
  /// waits for progress(). Reads only probes_ and busy_: safe from any thread.
  bool maybe_pending() const noexcept override;

  const Settings& settings() const { return cfg_; }
  int rank() const { return ctx_.rank; }

 private:
  friend class ShmEndpoint;

  // epoll tags: the kind in the top byte, a rank or pending id below.
  static constexpr uint64_t kTagListener = 1ull << 56;
  static constexpr uint64_t kTagPending = 2ull << 56;
  static constexpr uint64_t kTagIn = 3ull << 56;
  static constexpr uint64_t kTagOut = 4ull << 56;
  static constexpr uint64_t kTagPid = 5ull << 56;
  static constexpr uint64_t kTagMask = 0xffull << 56;

  struct Event {
    enum class Kind { PutDone, PeerError } kind;
    int peer = -1;
    uint64_t cookie = 0;
    bool ok = true;
    std::string reason;
  };
  /// An accepted socket whose HELLO has not arrived yet.
  struct Pending {
    net::Fd sock;
    std::chrono::steady_clock::time_point since;
  };

  ShmEndpoint& make_endpoint(int peer);
  /// Creates our ring toward ep's peer and starts connecting to its socket. Throws
  /// TransportError when the ring cannot be made (/dev/shm too small).
  void start_out(ShmEndpoint& ep, std::chrono::steady_clock::time_point deadline);
  /// Connects (or retries) the outgoing socket; on success sends HELLO with the ring.
  void try_connect(ShmEndpoint& ep);
  /// Marks the connection broken: fails its puts, closes its sockets, reports once.
  void fail(ShmEndpoint& ep, const std::string& reason);
  /// The peer's socket closed: drain what it wrote, then fail with the right reason.
  void peer_closed(ShmEndpoint& ep, EventSink& sink, const std::string& how);

  int socket_pass(EventSink& sink);
  void accept_all();
  void read_pending(uint64_t id);
  void handle_hello(uint64_t id, Pending& p, const Control& c, int fd);
  void refuse(int sock, int peer, const std::string& reason);
  void read_out(ShmEndpoint& ep, EventSink& sink);
  void read_in(ShmEndpoint& ep, EventSink& sink);
  void check_deadlines();
  /// Adds fd to the epoll set under `tag` (retag: it is there already, under another tag).
  void watch(int fd, uint64_t tag, bool retag = false);
  int deliver(EventSink& sink);
  /// The fenced doorbell check of the sends that skipped it (ShmEndpoint::send).
  void check_unfenced();
  std::vector<ShmEndpoint*> unfenced_;
  /// Recomputes busy_ (serialized callers, after progress() and arm()).
  void update_busy();
  /// Notes work that progress() must do (a post queued a put or a doorbell check, ...).
  void note_busy() { busy_.store(true, std::memory_order_relaxed); }
  /// Gives a newly attached ring a probe for maybe_pending().
  void add_probe(ShmEndpoint& ep);

  TransportContext ctx_;
  Settings cfg_;
  uint64_t instance_ = 0;
  uint64_t probe_word_ = 0;  // peers read it to test cross-memory access
  std::string socket_name_;
  net::Fd listener_;
  net::Fd epoll_;
  std::shared_ptr<RegionTable> regions_;

  std::map<int, std::unique_ptr<ShmEndpoint>> eps_;
  std::vector<ShmEndpoint*> readers_;  // endpoints with an attached incoming ring
  std::unordered_map<uint64_t, Pending> pending_;
  uint64_t next_pending_ = 1;
  std::deque<Event> events_;
  size_t puts_pending_ = 0;  // endpoints' queued puts, all together
  int handshaking_ = 0;      // endpoints not ready and not failed
  uint32_t calls_ = 0;
  uint64_t progress_rounds_ = 0;  // progress() calls (ShmEndpoint::send's demotion)
  bool armed_ = false;

  // maybe_pending(): one probe per attached ring, in attach order, never freed or reused while
  // the transport lives (a reader on another thread may hold one; a ring attaches at most
  // once per peer, so world_size probes suffice); nprobes_ publishes them (release).
  std::unique_ptr<RingProbe[]> probes_;
  size_t probe_cap_ = 0;
  std::atomic<size_t> nprobes_{0};
  bool unprobed_ = false;  // a ring without a probe: maybe_pending() always answers true
  std::atomic<bool> busy_{true};
};

}  // namespace tpcomm::transport::shm
