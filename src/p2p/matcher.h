// Message matching of the p2p protocol, with no I/O so that it is unit-tested alone.
//
// A message is identified by its channel (group, source, tag) and a per-channel sequence
// number set by the sender. Arrivals may come out of order (several links, striping); a
// message becomes *ready* only when every earlier message of its channel has, so matching
// is non-overtaking per channel, as MPI and torch require. A ready message matches the
// earliest-posted receive that names its channel or its (group, tag) with any source; a
// receive matches the earliest ready message it accepts (for any source: the earliest to
// become ready among all sources).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

namespace tpcomm::p2p {

/// Source value of a receive that accepts any source.
inline constexpr int kAnySource = -1;

struct ChannelKey {
  uint64_t group = 0;
  int32_t src = 0;
  int32_t tag = 0;
  friend bool operator==(const ChannelKey&, const ChannelKey&) = default;
};

struct ChannelKeyHash {
  size_t operator()(const ChannelKey& k) const {
    uint64_t h = k.group * 0x9E3779B97F4A7C15ull;
    h ^= (static_cast<uint64_t>(static_cast<uint32_t>(k.src)) << 32) | static_cast<uint32_t>(k.tag);
    h *= 0xBF58476D1CE4E5B9ull;
    return static_cast<size_t>(h ^ (h >> 31));
  }
};

/// One pairing of a posted receive with a message.
struct Match {
  uint64_t recv_id;
  uint64_t msg_id;
};

class Matcher {
 public:
  /// Posts receive `recv_id` (non-zero) for (group, src or kAnySource, tag). Returns the id
  /// of the ready message it matched at once, or 0 when it stays posted.
  uint64_t post(uint64_t group, int src, int tag, uint64_t recv_id);

  /// Message `msg_id` (non-zero) with sequence `seq` arrived on `channel`. Appends to
  /// `matches` every pairing this made possible (the message itself and any that were
  /// waiting for it). Returns false, changing nothing, when `seq` was already delivered or
  /// is already buffered (a duplicate: a protocol error).
  bool arrive(const ChannelKey& channel, uint64_t seq, uint64_t msg_id,
              std::vector<Match>* matches);

  /// The latency path of arrive(): when message `seq` is the next of `channel`, nothing of
  /// the channel waits, and the earliest receive that accepts it names the channel (no
  /// any-source receive is posted), pairs them and returns the receive's id. Otherwise
  /// returns 0 and changes nothing: call arrive().
  uint64_t arrive_posted(const ChannelKey& channel, uint64_t seq);

  /// Removes a posted receive; false if it is not posted (already matched). `where`, when
  /// given, is the receive's (group, source or kAnySource, tag): only that queue is searched.
  bool cancel(uint64_t recv_id, const ChannelKey* where = nullptr);

  /// Posted receives of `group`, and ready or early messages of `group` (for cleanup).
  std::vector<uint64_t> posted_in_group(uint64_t group) const;
  std::vector<uint64_t> messages_in_group(uint64_t group);

  /// Drops every ready or buffered message of `group` (when it is destroyed) and returns
  /// their ids.
  std::vector<uint64_t> drop_group(uint64_t group);

  size_t posted() const { return posted_; }
  size_t unexpected() const { return unexpected_; }
  /// Next sequence number expected on `channel` (0 for a new channel).
  uint64_t expected(const ChannelKey& channel) const;

 private:
  struct AnyKey {
    uint64_t group;
    int32_t tag;
    friend bool operator==(const AnyKey&, const AnyKey&) = default;
  };
  struct AnyKeyHash {
    size_t operator()(const AnyKey& k) const {
      return ChannelKeyHash()(ChannelKey{k.group, -7, k.tag});
    }
  };
  // Posted receives in post order: (order, recv id). Orders only grow, so the front is the
  // earliest; a deque costs no allocation per receive (matching is the latency path).
  using PostedQueue = std::deque<std::pair<uint64_t, uint64_t>>;
  struct Channel {
    uint64_t expected = 0;                            // next sequence to become ready
    std::map<uint64_t, uint64_t> early;               // seq -> msg id, arrived out of order
    std::deque<std::pair<uint64_t, uint64_t>> ready;  // (ready order, msg id), unmatched
    PostedQueue posted;                               // receives naming this source
  };
  static bool erase_recv(PostedQueue& q, uint64_t recv_id);
  /// channels_[key], through a one-entry cache (a ping-pong uses one channel each way).
  Channel& channel(const ChannelKey& key);

  // A message of `ch` became ready: match it or queue it.
  void on_ready(const ChannelKey& key, Channel& ch, uint64_t msg_id, std::vector<Match>* matches);

  std::unordered_map<ChannelKey, Channel, ChannelKeyHash> channels_;
  ChannelKey hot_key_;
  Channel* hot_ = nullptr;  // channels_[hot_key_] (map nodes are stable; reset on erase)
  std::unordered_map<AnyKey, PostedQueue, AnyKeyHash> any_posted_;
  // (group, tag) -> sources whose channel has ready, unmatched messages.
  std::unordered_map<AnyKey, std::set<int32_t>, AnyKeyHash> ready_sources_;
  size_t posted_ = 0;
  uint64_t next_order_ = 1;
  size_t unexpected_ = 0;
};

}  // namespace tpcomm::p2p
