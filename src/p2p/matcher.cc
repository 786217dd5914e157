#include "p2p/matcher.h"

namespace tpcomm::p2p {

uint64_t Matcher::post(uint64_t group, int src, int tag, uint64_t recv_id) {
  uint64_t order = next_order_++;
  if (src != kAnySource) {
    ChannelKey key{group, src, tag};
    Channel& ch = channels_[key];
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
    ch.posted.emplace(order, recv_id);
    recvs_.emplace(recv_id, RecvInfo{key, order});
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
  any_posted_[ak].emplace(order, recv_id);
  recvs_.emplace(recv_id, RecvInfo{ChannelKey{group, kAnySource, tag}, order});
  return 0;
}

bool Matcher::arrive(const ChannelKey& key, uint64_t seq, uint64_t msg_id,
                     std::vector<Match>* matches) {
  Channel& ch = channels_[key];
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
          has_specific && (!has_any || ch.posted.begin()->first < any->second.begin()->first);
      uint64_t recv;
      if (take_specific) {
        recv = ch.posted.begin()->second;
        ch.posted.erase(ch.posted.begin());
      } else {
        recv = any->second.begin()->second;
        any->second.erase(any->second.begin());
        if (any->second.empty()) any_posted_.erase(any);
      }
      recvs_.erase(recv);
      matches->push_back(Match{recv, msg_id});
      return;
    }
  }
  ch.ready.emplace_back(next_order_++, msg_id);
  ++unexpected_;
  ready_sources_[ak].insert(key.src);
}

bool Matcher::cancel(uint64_t recv_id) {
  auto it = recvs_.find(recv_id);
  if (it == recvs_.end()) return false;
  const RecvInfo& info = it->second;
  if (info.key.src == kAnySource) {
    AnyKey ak{info.key.group, info.key.tag};
    auto any = any_posted_.find(ak);
    if (any != any_posted_.end()) {
      any->second.erase(info.order);
      if (any->second.empty()) any_posted_.erase(any);
    }
  } else {
    auto ch = channels_.find(info.key);
    if (ch != channels_.end()) ch->second.posted.erase(info.order);
  }
  recvs_.erase(it);
  return true;
}

std::vector<uint64_t> Matcher::posted_in_group(uint64_t group) const {
  std::vector<uint64_t> out;
  for (auto& [id, info] : recvs_)
    if (info.key.group == group) out.push_back(id);
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
      for (auto& [order, id] : it->second.posted) recvs_.erase(id);
      it = channels_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = any_posted_.begin(); it != any_posted_.end();) {
    if (it->first.group == group) {
      for (auto& [order, id] : it->second) recvs_.erase(id);
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
