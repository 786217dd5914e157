// The ucx transport: one UCP context and worker per instance; endpoints from worker
// addresses published through the store; two-sided messages as tagged sends into pre-posted
// receives; registration with ucp_mem_map and packed rkeys; put either as ucp_put_nbx + flush
// + a tagged notification over RDMA lanes, or, where UCX would emulate RMA (its tcp lanes, and
// its shared memory for user buffers), as a tagged header plus a tagged data message that the
// target receives straight into the registered region (UCX's own zero-copy rendezvous).
// docs/transport.md explains the mapping and the choice.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tpcomm/transport/transport.hpp"
#include "transports/ucx/ucp_lib.h"

namespace tpcomm::ucx {

/// How an endpoint carries put: UCX RMA or tagged messages (auto: RMA over RDMA lanes, tagged
/// messages where UCX would emulate RMA: tcp, and shared memory into user buffers).
enum class PutMode : uint8_t { Auto, Rma, Tag };

/// Settings read from the registry (factory.cc).
struct Options {
  std::string library = "libucp.so.0";
  std::string tls;          ///< TPCOMM_UCX_TLS: UCX_TLS for tpcomm only ("" = UCX's own)
  std::string net_devices;  ///< TPCOMM_UCX_NET_DEVICES
  PutMode put = PutMode::Auto;
  size_t max_message = 256 * 1024;
  size_t rndv_threshold = 32 * 1024;
  int recv_depth = 32;
  size_t max_requests = 16384;  ///< TPCOMM_UCX_MAX_REQUESTS: live requests before NoResource
  bool tagged = true;  ///< TPCOMM_UCX_TAGGED: Capabilities::tagged_data (unless put is rma)
  /// TPCOMM_UCX_TAGGED=auto (not tag): the protocol's RTS travels inside UCX's own rendezvous
  /// RTS, an active message (Capabilities::tagged_data_with_message), to peers that take it.
  /// Receiving that form is on whenever tagged is.
  bool tagged_am = true;
  size_t tagged_max = 1u << 20;  ///< TPCOMM_UCX_TAGGED_MAX: Capabilities::tagged_data_max
  /// TPCOMM_UCX_CLOSE_TIMEOUT: how long shutdown waits for endpoint flushes to a live peer.
  std::chrono::milliseconds close_timeout{30000};
  static Options from_env();
};

class UcxTransport;
struct Req;

/// A UCP endpoint to one peer (made by connect; the peer makes its own towards us).
class UcxEndpoint : public transport::Endpoint {
 public:
  UcxEndpoint(UcxTransport& t, int peer) : t_(t), peer_(peer) {}
  int peer() const override { return peer_; }
  bool ready() const override { return true; }  // UCX queues operations during wire-up
  UcxTransport& transport();
  transport::PostStatus send(std::span<const iovec> iov) override;
  transport::PostStatus put(const transport::MemoryRegion& src, size_t src_offset,
                            const transport::RemoteKey& dst, size_t dst_offset, size_t length,
                            uint32_t imm, uint64_t cookie) override;
  transport::PostStatus send_tagged(const transport::MemoryRegion& src, size_t src_offset,
                                    size_t length, uint64_t id, uint64_t cookie) override;
  /// ucp_am_send_nbx with the message (behind the rank and id) as the active message's header
  /// and the data as its rendezvous payload: UCX's RTS carries the message.
  transport::PostStatus send_tagged_with_message(std::span<const iovec> message,
                                                 const transport::MemoryRegion& src,
                                                 size_t src_offset, size_t length, uint64_t id,
                                                 uint64_t cookie) override;

 private:
  /// Files a data send's UCX request `req` for `r`: pending, done at once, or failed (the
  /// endpoint then reports the error).
  void file_data_send(Req* r, void* req);
  /// A request for tagged data sent to the peer, reported as on_put_done(cookie).
  Req* new_data_send(uint64_t cookie);
  /// The bytes of a message to the peer; InvalidArgument above max_message.
  size_t checked_message_size(std::span<const iovec> iov) const;
  /// InvalidArgument unless [src_offset, +length) lies inside `src`.
  void check_data_range(const transport::MemoryRegion& src, size_t src_offset,
                        size_t length) const;
  friend class UcxTransport;
  UcxTransport& t_;
  int peer_;
  ucp_ep_h ep_ = nullptr;
  bool rma_ = false;     ///< put via ucp_put_nbx (else tagged messages, but see RKey::mapped)
  /// send_tagged_with_message as one active message (the peer takes them: its address says
  /// so); otherwise as the message and then the data.
  bool am_ = false;
  bool failed_ = false;  ///< error reported (or about to be)
  std::string info_;     ///< lanes, for logs
  /// An unpacked remote key; mapped: UCX reaches its memory through a local mapping
  /// (ucp_rkey_ptr succeeded: the peer's memory from ucp_mem_map ALLOCATE over shared memory),
  /// so ucp_put_nbx into it is native even on an endpoint that otherwise puts by tags.
  struct RKey {
    ucp_rkey_h rkey = nullptr;
    bool mapped = false;
  };
  /// The unpacked key of `dst` (cached by its blob); null rkey: UCX refused it.
  const RKey& rkey_of(const transport::RemoteKey& dst);
  std::map<std::vector<uint8_t>, RKey> rkeys_;
  static constexpr int kMaxMappedKeys = 64;
  int mapped_keys_ = 0;  ///< entries of rkeys_ that are mapped
  int rma_in_flight_ = 0;
  int pid_ = -1;    ///< watched peer process (lanes without UCX peer-failure support)
  int pidfd_ = -1;  ///< pidfd of pid_ (readable once it exits), -1: kill(pid, 0)
};

/// A region mapped with ucp_mem_map; the packed rkey travels in RemoteKey.blob.
class UcxRegion : public transport::MemoryRegion {
 public:
  /// Registers the user's [addr, addr+length).
  UcxRegion(UcxTransport& t, void* addr, size_t length, Device device);
  /// Adopts memory that ucp_mem_map ALLOCATE made (memh), with its rkey packed always.
  UcxRegion(UcxTransport& t, ucp_mem_h memh, void* addr, size_t length);
  ~UcxRegion() override;
  transport::RemoteKey remote_key() const override { return key_; }

 private:
  /// Packs memh_'s rkey into key_ (a key over kMaxBlob leaves the blob empty).
  void pack_key();
  UcxTransport& t_;
  ucp_mem_h memh_ = nullptr;
  transport::RemoteKey key_;
};

class UcxTransport : public transport::Transport {
 public:
  UcxTransport(const transport::TransportContext& ctx, const Options& opt);
  ~UcxTransport() override;

  const char* name() const override { return "ucx"; }
  transport::Capabilities capabilities() const override { return caps_; }
  std::vector<uint8_t> address() const override { return address_; }
  transport::Endpoint& connect(int peer, std::span<const uint8_t> peer_address,
                               std::chrono::steady_clock::time_point deadline) override;
  std::unique_ptr<transport::MemoryRegion> register_memory(void* addr, size_t length,
                                                           Device device) override;
  /// ucp_mem_map ALLOCATE: over UCX's shared memory a segment the peer maps, so puts into it
  /// go by ucp_put_nbx (a copy into the mapping) rather than as tagged messages.
  std::unique_ptr<transport::MemoryRegion> allocate_memory(size_t length,
                                                           Device device) override;
  int progress(transport::EventSink& sink) override;
  int wait_fd() const override { return efd_; }
  bool arm() override;
  bool transferring() override;
  void recv_tagged(int peer, uint64_t id, const transport::MemoryRegion& dst, size_t offset,
                   size_t length, uint32_t imm) override;
  void discard_tagged(int peer, uint64_t id) override;

  // For UCX callbacks (run inside ucp_worker_progress): queue what progress() reports.
  void push_completed(Req* r) { completed_.push_back(r); }
  /// kAmTaggedId arrived: queued for progress(), which holds the data and reports the
  /// message. Returns UCS_INPROGRESS when UCX's descriptor is kept.
  ucs_status_t on_tagged_am(const void* header, size_t header_length, void* data, size_t length,
                            uint64_t recv_attr);
  void on_ep_error(UcxEndpoint& e, ucs_status_t status);

 private:
  /// Posts the receive of `len` bytes of data tagged `tag` from `peer` straight into `to`; its
  /// arrival is reported as on_put_arrived(peer, imm) (tag-mode puts and tagged data).
  void post_data_recv(int peer, uint32_t imm, uintptr_t to, size_t len, uint64_t tag);
  /// The request of a receive of `len` bytes from `peer` into `to`, reported as
  /// on_put_arrived(peer, imm).
  Req* new_data_recv(int peer, uint32_t imm, uintptr_t to, size_t len);
  /// Tagged data that came with a message (kAmTaggedId) and waits for recv_tagged or
  /// discard_tagged: UCX's descriptor (a rendezvous not yet started), or the bytes.
  struct Held {
    void* desc = nullptr;
    size_t length = 0;
    std::vector<uint8_t> copy;
  };
  static uint64_t held_key(int peer, uint64_t id) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(peer)) << 32) | (id & 0x3fffffffu);
  }
  /// Gives UCX back a held descriptor (for a rendezvous: its ATS completes the sender's send
  /// without moving the data).
  void release_held(Held& h);
  /// Releases what `peer` holds here (every peer when -1).
  void release_held_of(int peer);
  /// progress(): a TaggedRts request: holds its data under (peer, id), then reports the
  /// message to `sink`.
  void hold_tagged(Req* r, transport::EventSink& sink, int& events);
  friend class UcxEndpoint;
  friend class UcxRegion;
  friend struct Req;

  // Posting (engine lock held by the caller).
  transport::PostStatus send_tagged(UcxEndpoint& e, uint64_t tag, std::span<const iovec> iov,
                                    Req* r);
  void post_pool_recv(int index);
  void post_notify(Req* flushed);
  void handle_put_header(int peer, const uint8_t* p, size_t n, transport::EventSink& sink,
                         int& events);
  void finish(Req* r, transport::EventSink& sink, int& events);
  void check_pids();
  /// Shutdown: progresses UCX a little, then frees the requests it reported complete.
  void drain_completed();
  /// Shutdown: withdraws work on user memory, closes every endpoint (flushed while the peer
  /// lives, up to TPCOMM_UCX_CLOSE_TIMEOUT; forced otherwise) and closes the pid watches.
  void close_endpoints();
  Req* new_req();
  void release(Req* r);
  std::string peer_text(int peer) const;

  const UcpLib& u_;
  Options opt_;
  transport::TransportContext ctx_;
  transport::Capabilities caps_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  std::vector<uint8_t> address_;
  uint64_t job_hash_ = 0;
  uint64_t host_hash_ = 0;
  uint64_t pidns_ = 0;
  int64_t next_pid_check_ms_ = 0;  ///< CLOCK_MONOTONIC_COARSE, ms
  std::unordered_map<int, std::unique_ptr<UcxEndpoint>> eps_;

  // Pre-posted receives for messages, put headers and notifications.
  std::vector<std::vector<uint8_t>> pool_buf_;
  std::vector<Req*> pool_req_;

  std::unordered_set<Req*> live_;   ///< every request UCX may still call back
  std::vector<Req*> completed_;     ///< filled by UCX callbacks, drained by progress()
  std::vector<Req*> done_scratch_;  ///< progress(): the batch being reported
  std::vector<Req*> free_;          ///< recycled requests (and their copy buffers)
  std::deque<std::pair<int, std::string>> errors_;  ///< peer errors to report
  std::unordered_set<int> reported_;
  std::multimap<uintptr_t, uintptr_t> regions_;  ///< registered ranges: start -> end
  std::unordered_map<uint64_t, Held> held_;      ///< held_key(peer, id) -> tagged data
  size_t max_am_header_ = 0;  ///< UCX's largest active-message header (0: no AM feature)
  /// Tag-mode put data in flight (PutData, DataRecv) and when UCX last moved bytes while
  /// there was some: arm() polls instead of sleeping during a transfer.
  int transfers_ = 0;
  /// Bumped by every progress call that moved something while transfers ran, and when a
  /// transfer starts: the clock stays off the progress path.
  uint64_t moved_rounds_ = 0;
  /// One caller's view of moved_rounds_ (the progress thread's arm(), the waits'
  /// transferring()), so that neither one's look resets the other's window.
  struct MoveWatch {
    uint64_t seen = 0;
    std::chrono::steady_clock::time_point at{};  // when this caller last saw it move
  };
  MoveWatch arm_watch_, wait_watch_;
  /// True while transfers run and moved_rounds_ changed since `w`'s last look, or within
  /// kBusyPoll of the look that last saw it change.
  bool moving(MoveWatch& w);
  uint32_t busy_calls_ = 0;    // progress calls that moved something (the pid watch's pace)
  static constexpr std::chrono::microseconds kBusyPoll{500};
  size_t max_live_ = 16384;  ///< opt_.max_requests, at least the pool plus 8
  int rma_endpoints_ = 0;    ///< endpoints that put by ucp_put_nbx (regions need rkeys)
  uint32_t next_put_id_ = 1;
  size_t buffered_bytes_ = 0;
  bool closing_ = false;
  uint8_t discard_buf_[64] = {};  ///< where discard_tagged's truncated receives land
};

}  // namespace tpcomm::ucx
