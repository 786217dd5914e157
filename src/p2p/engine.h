// The point-to-point protocol engine: one per world (process group job), shared by every
// group created on it. It owns the transports, one link per (transport, peer), the matcher,
// and the progress machinery (adaptive wait + a background progress thread).
//
// Protocol (written once for every transport, docs/transport.md):
//   eager       header + payload in one message when it fits under the rendezvous threshold
//   rendezvous  RTS(send id) -> receiver matches, registers its buffer -> CTS(key, recv id)
//               -> sender puts the data with notification imm = recv id -> both complete
//   tagged data where the transport matches large messages itself (UCX): RTS(send id, data id)
//               and the data as tagged data at once -> the receiver receives it in place;
//               a CTS only to refuse
//   credits     when a transport pre-posts bounce buffers (recv_slots > 0)
//   matching    by (group, source, tag, sequence); out-of-order arrival; any source
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/deadline.h"
#include "core/liveness.h"
#include "p2p/matcher.h"
#include "p2p/op.h"
#include "p2p/op_table.h"
#include "p2p/range_set.h"
#include "p2p/wire.h"
#include "tpcomm/store.hpp"
#include "tpcomm/transport/transport.hpp"

namespace tpcomm::p2p {

class Engine;
struct TopoState;  // link_choice.h

/// One transport instance and what the engine knows about it.
struct Slot;

/// An operation waiting for a credit or for transport resources.
struct Pending {
  bool is_put = false;
  std::vector<uint8_t> hdr;       ///< message: encoded header (+ trailer)
  const void* payload = nullptr;  ///< message: eager payload (the user's buffer)
  size_t payload_len = 0;
  /// A cancelled eager send's payload, copied here so the user's buffer is free (cancel).
  std::vector<uint8_t> owned;
  std::shared_ptr<Op> op;  ///< eager send completed once posted; put owner
  // put
  size_t offset = 0, length = 0;
  transport::RemoteKey key;
  uint32_t imm = 0;
  /// A put (is_put) that is tagged data under op->data_id instead (Endpoint::send_tagged;
  /// with `hdr` non-empty, send_tagged_with_message carrying that RtsData).
  bool is_tagged = false;
  /// Not a post: drop the peer's tagged data `data_id` (Transport::discard_tagged) once the
  /// messages queued before it (the refusal's CTS) are posted, so the sender hears of the
  /// refusal before its data send completes.
  bool is_discard = false;
  uint64_t data_id = 0;
};

/// A connection to one peer through one transport.
struct Link {
  Slot* slot = nullptr;
  int peer = -1;
  transport::Endpoint* ep = nullptr;
  size_t eager_limit = 0;  ///< largest eager payload
  bool flow = false;       ///< credit-based flow control on
  uint32_t credits = 0;    ///< messages we may still send (flow)
  uint32_t owed = 0;       ///< bounce buffers consumed, not yet returned to the peer (flow)
  uint32_t slots = 0;
  std::deque<Pending> queue;
  bool failed = false;
  std::string reason;  ///< why this transport joins the pair (topology choice or fallback)
  /// The channel last sent on through this link and its counter in Engine::send_seq_ (a map
  /// node: its address is stable), so that repeated sends skip the hash lookup.
  uint64_t seq_group = 0;
  int32_t seq_tag = 0;
  uint64_t* seq_counter = nullptr;
};

/// Group facts the engine uses to validate and to describe operations.
struct GroupInfo {
  uint64_t id = 0;
  std::string name;
  std::string backend;     ///< "auto", "tcp", "shm", ...
  std::vector<int> ranks;  ///< global ranks, index = group rank
  int backend_id = -1;     ///< the engine's index of `backend` (set by add_group)
};

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  struct Options {
    int rank = 0;
    int world_size = 1;
    std::shared_ptr<Store> store;  ///< already prefixed for this world
    std::string job_id;
    std::string host_id;
    std::chrono::milliseconds timeout{300000};
    std::string backend = "auto";  ///< the world group's backend (transports made at start)
  };

  /// Starts the transports the backend may use and publishes their addresses and the host
  /// id. Does not wait for peers.
  static std::shared_ptr<Engine> create(const Options& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int rank() const { return opt_.rank; }
  int world_size() const { return opt_.world_size; }
  const Options& options() const { return opt_; }

  /// Makes sure the transports of `backend` exist here (new_group with another backend).
  void prepare_backend(const std::string& backend);

  /// Connects to every peer in `peers` (TPCOMM_CONNECT=eager) and waits until all links are
  /// ready, or throws TimeoutError naming the peers still missing.
  void connect_all(const std::string& backend, const std::vector<int>& peers, Deadline deadline);

  /// Registers a group so that its operations are described by name; and forgets it.
  void add_group(GroupInfo& g);  // sets g.backend_id
  /// Fails every pending operation of the group with AbortedError and drops its unexpected
  /// messages; later messages for it are dropped.
  void remove_group(uint64_t group);

  /// Posts a send to global rank `dst` / a receive from `src` (or kAnySource). Arguments are
  /// validated by the caller (ProcessGroup); these throw only for engine-level problems.
  std::shared_ptr<Op> post_send(const GroupInfo& g, int dst, int tag, const Tensor& t);
  std::shared_ptr<Op> post_recv(const GroupInfo& g, int src, int tag, const Tensor& t);
  /// The same into a fresh Op the caller allocated (inside its Work: one allocation per
  /// operation); the engine copies the pointer only while it needs the op.
  void post_send(const GroupInfo& g, int dst, int tag, const Tensor& t,
                 const std::shared_ptr<Op>& op);
  void post_recv(const GroupInfo& g, int src, int tag, const Tensor& t,
                 const std::shared_ptr<Op>& op);
  /// A blocking send's latency path: posts `t` to global rank `dst` as an eager message if
  /// it can go out at once (the link is chosen already, no credits, nothing queued, the
  /// transport accepts it) and returns true: the send is complete and needs no Op. Otherwise
  /// it does nothing (no sequence number taken) and returns false: post_send then sends,
  /// queues or fails it with its message.
  bool send_now(const GroupInfo& g, int dst, int tag, const Tensor& t);

  /// Adaptive wait (spin, yield, block) until `op` is done or the deadline passes; rethrows
  /// the op's error; TimeoutError says what the op was waiting for.
  void wait(Op& op, Deadline deadline);
  /// The same with a timeout that starts when the wait first reads the clock (not at all
  /// when the op is already done, or ends within a few rounds: the latency path).
  void wait(Op& op, std::chrono::milliseconds timeout);
  /// Progresses once if no other thread is, and reports whether `op` is done.
  bool test(Op& op);

  /// Cancels a pending operation so that the engine never touches its buffer once this
  /// returns (the collectives' Request destructor relies on it). A receive still waiting for
  /// its message leaves the matcher; a rendezvous send still waiting for its CTS is forgotten
  /// (a late CTS is ignored); a queued eager send keeps its place in the channel (the peer
  /// still receives it) with its payload copied into the queue. Data already moving
  /// (Stage::Transfer) cannot be recalled: cancel waits for it until `grace`, and returns
  /// false if it is still moving then (the buffer may still be written or read). A cancelled
  /// operation completes with AbortedError. Returns true when the op is done.
  bool cancel(const std::shared_ptr<Op>& op, Deadline grace);

  /// Name of the transport used to reach `peer` for `backend` (for logs and tests); connects.
  std::string transport_for(const std::string& backend, int peer);

  /// The transport that joins this rank to `peer` for `backend` and why (connects).
  struct LinkDescription {
    std::string transport;
    std::string reason;
  };
  LinkDescription describe_link(const std::string& backend, int peer);
  /// Capabilities (latency and bandwidth hints) of the transport reaching `peer`; connects.
  transport::Capabilities link_capabilities(const std::string& backend, int peer);
  /// The host id `peer` published (TPCOMM_HOSTID or host name + boot id); blocks on the store
  /// until the peer has started. Cached.
  std::string peer_host(int peer);
  /// Why `peer` was declared lost (its link failed, its process exited or stayed stopped:
  /// the watch is asked now), or "" while it is not.
  std::string peer_failure(int peer);
  /// The job's liveness watch (core/liveness.h): the direct-read collectives ask it too.
  const std::shared_ptr<PeerWatch>& watch() const { return watch_; }
  /// Learns now every peer that has published its liveness record (store look-ups).
  void resolve_peers() { watch_->resolve(*opt_.store, true); }
  /// A message that no receive has taken yet.
  struct Unmatched {
    int32_t src;  ///< global rank
    int32_t tag;
    uint64_t bytes;
  };
  /// The unmatched messages of `group`: the collectives' signature check looks there for a
  /// peer running another call (a slow path: it walks the group's channels).
  std::vector<Unmatched> unmatched(uint64_t group);

  /// Stops the progress thread and closes every transport (flushing what was sent).
  void shutdown();

  // EventSink entry points (called from Slot's sink adapter under the engine lock).
  /// Marks a transport used (it carries a link or delivered a message) and updates
  /// syscall_polls_. Under the engine lock.
  void mark_used_locked(Slot& s);
  void handle_message(Slot& s, int peer, std::span<const uint8_t> data);
  void handle_message_unguarded(Slot& s, int peer, std::span<const uint8_t> data);
  void handle_put_arrived(Slot& s, int peer, uint32_t imm);
  void handle_put_done(Slot& s, uint64_t cookie, bool ok);
  void handle_peer_error(Slot& s, int peer, const std::string& reason);

 private:
  explicit Engine(const Options& options);

  // Transports and links (engine lock held unless noted).
  Slot* make_slot_locked(const std::string& name);
  Slot* find_slot_locked(const std::string& name);
  std::vector<std::string> candidates_locked(const std::string& backend);
  /// The transport for `peer`: the topology's choice (select_link on both summaries) when
  /// the backend is auto and both ranks have one, else the fallback order; `reason` says why.
  std::string choose_locked(const std::string& backend, int peer, std::string* reason);
  std::vector<uint8_t> peer_address(const std::string& transport, int peer);  // no lock
  Link* link_locked(Slot& s, int peer);  // connects when needed; address must be cached
  /// The link to `peer` for `backend` (backend_id: its index from add_group, or -1 to look it
  /// up); chooses and connects on first use.
  Link* link_for(std::unique_lock<std::mutex>& lk, const std::string& backend, int peer,
                 int backend_id = -1);
  int backend_id_locked(const std::string& backend);
  /// The link chosen before for (backend id, peer) without hashing, or null (not chosen yet).
  Link* chosen_link_locked(int backend_id, int peer) const;
  /// The send counter of channel (group, dst, tag) through `l`, cached on the link so that
  /// repeated sends on one channel skip the hash lookup.
  uint64_t* seq_counter_locked(Link& l, uint64_t group, int dst, int tag);

  // Sending (engine lock).
  /// Posts an eager message (encoded header + payload) straight to the link's endpoint when
  /// it can go out at once (nothing queued, no credits, not failed, the transport accepts it);
  /// false: nothing was sent.
  bool post_eager_now_locked(Link& l, uint8_t* hdr, const void* payload, size_t bytes);
  void send_msg_locked(Link& l, uint8_t* hdr, size_t hdr_len, const void* payload, size_t len,
                       const std::shared_ptr<Op>& op);
  /// Posts a message now if credits and the transport allow (true also when it failed the
  /// op); false: it must wait.
  bool post_msg_locked(Link& l, uint8_t* hdr, size_t hdr_len, const void* payload, size_t len,
                       const std::shared_ptr<Op>& op);
  void send_put_locked(Link& l, std::shared_ptr<Op> op, size_t offset, size_t length,
                       const transport::RemoteKey& key, uint32_t imm);
  /// Sends a rendezvous message's data as tagged data (Capabilities::tagged_data), queued
  /// behind the link's backlog like a put. A non-empty `rts` (the encoded RtsData) travels
  /// with the data (Capabilities::tagged_data_with_message) instead of as a message before it.
  void send_tagged_locked(Link& l, std::shared_ptr<Op> op, std::span<const uint8_t> rts = {});
  bool try_post_locked(Link& l, Pending& p);
  void flush_queue_locked(Link& l);
  void return_credits_locked(Link& l);

  // Receiving (engine lock).
  void on_match_locked(const std::shared_ptr<Op>& recv, uint64_t msg_id);
  void start_rendezvous_recv_locked(const std::shared_ptr<Op>& recv, struct Incoming& in);
  void send_cts_locked(Link& l, const Header& req, const Cts& c);
  void handle_cts_locked(Link& l, const Decoded& d);
  /// Drops the tagged data of an RtsData message that no receive will take (refused, or its
  /// group is gone), so that the transport does not hold it and the sender's send completes.
  void discard_tagged_locked(Slot& s, const Header& h, const Rts& r);
  /// Refuses tagged data: the CTS `c` with the reason, then the data dropped behind it.
  void refuse_tagged_locked(Link& l, const Header& h, const Cts& c, const Rts& r);

  // Completion (engine lock).
  void complete_locked(const std::shared_ptr<Op>& op);
  void fail_locked(const std::shared_ptr<Op>& op, std::exception_ptr e);
  /// Declares `peer` lost: dead (its connection or process ended), or unresponsive (`silent`:
  /// no heartbeat); every pending and later operation with it fails naming it.
  void fail_peer_locked(int peer, const std::string& reason, bool silent = false);
  std::string group_name_locked(uint64_t group) const;

  // Progress.
  /// One round over the transports and the backlog; unused transports only when
  /// `everything` (or every 64th call).
  int progress_locked(bool everything = false);
  void progress_thread_main();
  void wake_progress_thread();
  /// True when a used transport is moving a transfer's bytes (Transport::transferring); takes
  /// the engine lock only if it is free (false otherwise). For a wait past its spin.
  bool transferring_now();
  std::string waiting_for(const Op& op);
  /// wait(): until `until`, or `timeout` from the first clock reading when it is >= 0.
  void wait_impl(Op& op, std::chrono::steady_clock::time_point until,
                 std::chrono::milliseconds timeout);

  Options opt_;
  mutable std::mutex mu_;  // the engine lock: protocol state and every transport call
  /// Takes mu_ (blocking).
  std::unique_lock<std::mutex> lock_engine() const { return std::unique_lock<std::mutex>(mu_); }
  std::condition_variable done_cv_;

  std::vector<std::unique_ptr<Slot>> slots_;
  std::unordered_map<uint64_t, std::unique_ptr<Link>> links_;  // (slot index << 32) | peer
  std::unordered_map<uint64_t, Link*> chosen_;                 // (backend id << 32) | peer -> link
  std::vector<std::vector<Link*>> chosen_fast_;  // [backend id][peer]: chosen_ without hashing
  std::vector<std::string> backends_;            // backend id -> name
  std::unordered_set<Link*> backlog_;            // links with a non-empty queue
  // Links that consumed a bounce buffer in this progress() call: their credits may go back
  // only after the call returns, when the transport has reposted the buffers (a return sent
  // from inside the callback let the peer send into a buffer not yet reposted).
  std::vector<Link*> credit_due_;
  std::unordered_map<std::string, std::vector<uint8_t>> addr_cache_;  // "name/rank" (own lock)
  std::unordered_map<int, std::string> host_cache_;
  std::mutex cache_mu_;

  std::unique_ptr<TopoState> topo_;  // this rank's topology summary, peers' summaries

  Matcher matcher_;
  std::unordered_map<uint64_t, struct Incoming*> incoming_;
  std::pair<uint64_t, struct Incoming*> current_{0, nullptr};  // message in handle_message
  uint64_t next_msg_id_ = 1;
  uint32_t next_data_id_ = 1;                 // ids of tagged data sent (Op::data_id)
  OpTable ops_;                               // in flight, by id
  std::vector<std::shared_ptr<Op>> retired_;  // completed ops' table references, dropped soon
  struct SeqKey {
    uint64_t group;
    int32_t dst;
    int32_t tag;
    friend bool operator==(const SeqKey&, const SeqKey&) = default;
  };
  struct SeqKeyHash {
    size_t operator()(const SeqKey& k) const {
      return ChannelKeyHash()(ChannelKey{k.group, k.dst, k.tag});
    }
  };
  std::unordered_map<SeqKey, uint64_t, SeqKeyHash> send_seq_;
  RangeSet active_ranges_;  // buffers of pending receives
  std::unordered_map<uint64_t, GroupInfo> groups_;
  std::unordered_set<uint64_t> removed_groups_;
  std::unordered_map<int, std::string> dead_peers_;
  std::vector<Match> match_scratch_;

  // Progress thread and the adaptive wait.
  std::thread progress_thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> spinners_{0};
  std::atomic<int> sleepers_{0};         // user threads blocked on done_cv_
  std::atomic<uint64_t> spin_epoch_{0};  // bumped whenever a wait stops spinning, and by test()
  /// A plain load and store: the progress thread only looks for a change, so an increment
  /// lost between two bumping threads costs nothing.
  void bump_spin_epoch() {
    spin_epoch_.store(spin_epoch_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  /// Every used transport polls by a system call (Capabilities::progress_is_syscall); kept by
  /// mark_used_locked, read by waits without the lock.
  std::atomic<bool> syscall_polls_{false};
  std::atomic<bool> progress_sleeping_{false};  // the progress thread is in (or entering) epoll
  /// How often the parked progress thread looks again while user threads wait, when their
  /// core is contended (or nothing says otherwise): each look is a timer wake-up on the
  /// spinner's core, and under other processes' load these frequent wake-ups win the core
  /// back for the rank.
  static constexpr std::chrono::milliseconds kLinger{1};
  /// The same on a calm core, where each of those wake-ups only interrupts the spinner.
  static constexpr std::chrono::milliseconds kLingerCalm{8};
  /// A waiting thread got less than 90% of its core over the last look at its CPU time
  /// (note_core_share): the progress thread parks for kLinger, otherwise for kLingerCalm.
  std::atomic<bool> core_contended_{true};
  void note_core_share(std::chrono::steady_clock::time_point now);
  std::mutex park_mu_;
  std::condition_variable park_cv_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  // The transports' wait_fd()s. They are in epoll_fd_ only while the progress thread sleeps
  // on it: a watched fd that is itself an epoll set (UCX's worker, the tcp transport's) passes
  // every arrival on its sockets up to epoll_fd_'s callback, on the core that delivers the
  // packet (over loopback, the sender's), even while nobody sleeps here.
  std::vector<int> sleep_fds_;
  bool any_without_fd_ = false;
  int64_t spin_us_ = 0, yield_us_ = 0;
  uint64_t progress_calls_ = 0;
  bool shut_down_ = false;

  // Dead-peer detection (progress.cc): every beat_interval_ a heartbeat (a credit-only
  // message) goes out on each connected link; a watched peer from which nothing arrived for
  // beat_timeout_ is failed like a closed connection. Checked every 64th progress call and
  // by the progress thread: nothing on the data path but the per-slot arrival counters.
  struct PeerBeat {
    bool watched = false;                         ///< a link to the peer exists
    uint64_t heard = 0;                           ///< sum of the slots' counters at the last change
    std::chrono::steady_clock::time_point since;  ///< when `heard` last changed
  };
  /// Sends heartbeats and fails silent peers when a beat is due; collects in need_link_
  /// the peers that talk to us over a slot where we have no link (they get one, so that
  /// heartbeats flow back).
  void heartbeat_locked();
  /// Progress thread: makes the links heartbeat_locked asked for (address lookups unlocked).
  void make_wanted_links();
  std::chrono::milliseconds beat_interval_{0}, beat_timeout_{0};
  std::chrono::steady_clock::time_point next_beat_{};
  /// Same-host peers' pidfds and process states, and every loss the heartbeats found; polled
  /// every kWatchPeriod from heartbeat_locked (the progress thread sleeps at most 200 ms).
  std::shared_ptr<PeerWatch> watch_;
  static constexpr std::chrono::milliseconds kWatchPeriod{100};
  std::chrono::steady_clock::time_point next_watch_{};
  /// Peers the last watch found dead, failed at the next one (heartbeat_locked).
  std::vector<std::pair<int, std::string>> dying_;
  std::vector<PeerBeat> beats_;                   // by global rank
  std::vector<std::pair<Slot*, int>> need_link_;  // (slot, peer)

  friend struct Slot;
};

}  // namespace tpcomm::p2p
