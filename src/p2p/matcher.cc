#include "p2p/matcher.h"

namespace tpcomm::p2p {

Matcher::Channel& Matcher::channel(const ChannelKey& key) {
  if (hot_ && hot_key_ == key) return *hot_;
  Channel& ch = channels_[key];
  hot_key_ = key;
  hot_ = &ch;
  return ch;
}

uint64_t Matcher::arrive_posted(const ChannelKey& key, uint64_t seq) {
  if (!any_posted_.empty()) return 0;
  Channel& ch = channel(key);
  if (seq != ch.expected || ch.posted.empty() || !ch.ready.empty() || !ch.early.empty()) return 0;
  ++ch.expected;
  uint64_t recv = ch.posted.front().second;
  ch.posted.pop_front();
  --posted_;
  return recv;
}

uint64_t Matcher::post(uint64_t group, int src, int tag, uint64_t recv_id) {
  uint64_t order = next_order_++;
  if (src != kAnySource) {
    ChannelKey key{group, src, tag};
    Channel& ch = channel(key);
    if (!ch.ready.empty()) {
      uint64_t msg = ch.ready.front().second;
      ch.ready.pop_front();
      --unexpected_;
      if (ch.ready.empty()) {
        auto it = ready_sources_.find(AnyKey{group, tag});
        if (it != ready_sources_.end()) {
          it->second.erase(src);
          if (it->second.empty()) ready_sources_.erase(it);
        }
      }
      return msg;
    }
    ch.posted.emplace_back(order, recv_id);
    ++posted_;
    return 0;
  }
  AnyKey ak{group, tag};
  auto rs = ready_sources_.find(ak);
  if (rs != ready_sources_.end()) {
    // The earliest-ready message among the sources that have one.
    Channel* best = nullptr;
    int32_t best_src = 0;
    for (int32_t s : rs->second) {
      Channel& ch = channels_[ChannelKey{group, s, tag}];
      if (!ch.ready.empty() && (!best || ch.ready.front().first < best->ready.front().first)) {
        best = &ch;
        best_src = s;
      }
    }
    if (best) {
      uint64_t msg = best->ready.front().second;
      best->ready.pop_front();
      --unexpected_;
      if (best->ready.empty()) {
        rs->second.erase(best_src);
        if (rs->second.empty()) ready_sources_.erase(rs);
      }
      return msg;
    }
  }
  any_posted_[ak].emplace_back(order, recv_id);
  ++posted_;
  return 0;
}

bool Matcher::arrive(const ChannelKey& key, uint64_t seq, uint64_t msg_id,
                     std::vector<Match>* matches) {
  Channel& ch = channel(key);
  if (seq < ch.expected || ch.early.count(seq)) return false;
  if (seq > ch.expected) {
    ch.early.emplace(seq, msg_id);
    ++unexpected_;
    return true;
  }
  ++ch.expected;
  on_ready(key, ch, msg_id, matches);
  // Release the early arrivals that were waiting for this one.
  for (auto it = ch.early.begin(); it != ch.early.end() && it->first == ch.expected;
       it = ch.early.erase(it)) {
    ++ch.expected;
    --unexpected_;
    on_ready(key, ch, it->second, matches);
  }
  return true;
}

void Matcher::on_ready(const ChannelKey& key, Channel& ch, uint64_t msg_id,
                       std::vector<Match>* matches) {
  AnyKey ak{key.group, key.tag};
  // Messages already waiting in this channel keep their order: a new one queues behind.
  if (ch.ready.empty()) {
    auto any = any_posted_.find(ak);
    bool has_specific = !ch.posted.empty();
    bool has_any = any != any_posted_.end() && !any->second.empty();
    if (has_specific || has_any) {
      bool take_specific =
          has_specific && (!has_any || ch.posted.front().first < any->second.front().first);
      uint64_t recv;
      if (take_specific) {
        recv = ch.posted.front().second;
        ch.posted.pop_front();
      } else {
        recv = any->second.front().second;
        any->second.pop_front();
        if (any->second.empty()) any_posted_.erase(any);
      }
      --posted_;
      matches->push_back(Match{recv, msg_id});
      return;
    }
  }
  ch.ready.emplace_back(next_order_++, msg_id);
  ++unexpected_;
  ready_sources_[ak].insert(key.src);
}

bool Matcher::erase_recv(PostedQueue& q, uint64_t recv_id) {
  for (auto it = q.begin(); it != q.end(); ++it) {
    if (it->second == recv_id) {
      q.erase(it);
      return true;
    }
  }
  return false;
}

bool Matcher::cancel(uint64_t recv_id, const ChannelKey* where) {
  bool found = false;
  if (where) {
    if (where->src == kAnySource) {
      auto any = any_posted_.find(AnyKey{where->group, where->tag});
      if (any != any_posted_.end()) {
        found = erase_recv(any->second, recv_id);
        if (any->second.empty()) any_posted_.erase(any);
      }
    } else {
      auto ch = channels_.find(*where);
      if (ch != channels_.end()) found = erase_recv(ch->second.posted, recv_id);
    }
  } else {
    for (auto& [key, ch] : channels_)
      if ((found = erase_recv(ch.posted, recv_id))) break;
    for (auto it = any_posted_.begin(); !found && it != any_posted_.end(); ++it) {
      if ((found = erase_recv(it->second, recv_id))) {
        if (it->second.empty()) any_posted_.erase(it);
        break;
      }
    }
  }
  if (found) --posted_;
  return found;
}

std::vector<uint64_t> Matcher::posted_in_group(uint64_t group) const {
  std::vector<uint64_t> out;
  for (auto& [key, ch] : channels_)
    if (key.group == group)
      for (auto& [order, id] : ch.posted) out.push_back(id);
  for (auto& [key, q] : any_posted_)
    if (key.group == group)
      for (auto& [order, id] : q) out.push_back(id);
  return out;
}

std::vector<uint64_t> Matcher::messages_in_group(uint64_t group) {
  std::vector<uint64_t> out;
  for (auto& [key, ch] : channels_) {
    if (key.group != group) continue;
    for (auto& [seq, id] : ch.early) out.push_back(id);
    for (auto& [order, id] : ch.ready) out.push_back(id);
  }
  return out;
}

std::vector<uint64_t> Matcher::drop_group(uint64_t group) {
  std::vector<uint64_t> out = messages_in_group(group);
  for (auto it = channels_.begin(); it != channels_.end();) {
    if (it->first.group == group) {
      unexpected_ -= it->second.early.size() + it->second.ready.size();
      posted_ -= it->second.posted.size();
      if (hot_ == &it->second) hot_ = nullptr;
      it = channels_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = any_posted_.begin(); it != any_posted_.end();) {
    if (it->first.group == group) {
      posted_ -= it->second.size();
      it = any_posted_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = ready_sources_.begin(); it != ready_sources_.end();)
    it = it->first.group == group ? ready_sources_.erase(it) : std::next(it);
  return out;
}

uint64_t Matcher::expected(const ChannelKey& channel) const {
  auto it = channels_.find(channel);
  return it == channels_.end() ? 0 : it->second.expected;
}

}  // namespace tpcomm::p2p
