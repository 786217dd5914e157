// The protocol's operations and message handling: posting sends and receives, matching,
// the rendezvous handshake (RTS -> CTS -> put with notification), completion and failure.
#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/log.h"
#include "core/small_copy.h"
#include "p2p/engine.h"
#include "p2p/engine_internal.h"
#include "tpcomm/error.hpp"

namespace tpcomm::p2p {
namespace {

// CTS status codes: why a receiver refused a rendezvous message.
constexpr uint32_t kCtsOk = 0;
constexpr uint32_t kCtsDTypeMismatch = 1;
constexpr uint32_t kCtsTooSmall = 2;
constexpr uint32_t kCtsOther = 3;

std::string hex(const void* p) {
  std::ostringstream os;
  os << p;
  return os.str();
}

// A group's name is fixed for its id: an op recycled for the same group keeps its copy.
inline void set_group_name(Op& op, const GroupInfo& g) {
  if (op.named && op.named_group == g.id) return;
  op.group_name = g.name;
  op.named_group = g.id;
  op.named = true;
}

}  // namespace

std::string Engine::group_name_locked(uint64_t group) const {
  auto it = groups_.find(group);
  return it == groups_.end() ? "?" : it->second.name;
}

void Engine::add_group(GroupInfo& g) {
  auto lk = lock_engine();
  g.backend_id = backend_id_locked(g.backend);
  groups_[g.id] = g;
  removed_groups_.erase(g.id);
}

void Engine::remove_group(uint64_t group) {
  auto lk = lock_engine();
  std::string name = group_name_locked(group);
  groups_.erase(group);
  removed_groups_.insert(group);
  auto aborted = [&](const Op& op) {
    return std::make_exception_ptr(
        AbortedError(op.describe() + " was aborted: process group '" + name + "' was destroyed"));
  };
  // Queued eager sends refer to user memory: take them out of the queues. Operations whose
  // data is already moving (Transfer) finish on their own.
  for (auto& [key, l] : links_) {
    for (auto it = l->queue.begin(); it != l->queue.end();) {
      if (!it->is_put && it->op && it->op->group == group) {
        fail_locked(it->op, aborted(*it->op));
        it = l->queue.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& op : ops_.snapshot())
    if (op->group == group && op->stage != Op::Stage::Transfer) fail_locked(op, aborted(*op));
  for (uint64_t msg : matcher_.drop_group(group)) {
    auto it = incoming_.find(msg);
    if (it != incoming_.end()) {
      if (it->second->h.type == MsgType::RtsData)
        discard_tagged_locked(*it->second->slot, it->second->h, it->second->rts);
      delete it->second;
      incoming_.erase(it);
    }
  }
}

// ---- posting ----------------------------------------------------------------------------

std::shared_ptr<Op> Engine::post_send(const GroupInfo& g, int dst, int tag, const Tensor& t) {
  auto op = std::make_shared<Op>();
  post_send(g, dst, tag, t, op);
  return op;
}

std::shared_ptr<Op> Engine::post_recv(const GroupInfo& g, int src, int tag, const Tensor& t) {
  auto op = std::make_shared<Op>();
  post_recv(g, src, tag, t, op);
  return op;
}

Link* Engine::chosen_link_locked(int backend_id, int peer) const {
  if (backend_id < 0 || static_cast<size_t>(backend_id) >= chosen_fast_.size()) return nullptr;
  const auto& row = chosen_fast_[static_cast<size_t>(backend_id)];
  return static_cast<size_t>(peer) < row.size() ? row[static_cast<size_t>(peer)] : nullptr;
}

uint64_t* Engine::seq_counter_locked(Link& l, uint64_t group, int dst, int tag) {
  if (!l.seq_counter || l.seq_group != group || l.seq_tag != tag) {
    l.seq_counter = &send_seq_[SeqKey{group, dst, tag}];
    l.seq_group = group;
    l.seq_tag = tag;
  }
  return l.seq_counter;
}

bool Engine::send_now(const GroupInfo& g, int dst, int tag, const Tensor& t) {
  const size_t bytes = t.nbytes();
  auto lk = lock_engine();
  // Anything unusual (shut down, a lost peer, a link not made yet, credits, a backlog, a
  // message too large) is post_send's, with its errors and its queue.
  if (shut_down_ || !dead_peers_.empty()) return false;
  Link* l = chosen_link_locked(g.backend_id, dst);
  if (!l || bytes > l->eager_limit) return false;
  uint64_t* seq_counter = seq_counter_locked(*l, g.id, dst, tag);
  Header h;
  h.group = g.id;
  h.src = opt_.rank;
  h.tag = tag;
  h.dtype = t.dtype;
  h.bytes = bytes;
  h.seq = *seq_counter;
  uint8_t hdr[kHeaderSize];
  encode_header(h, hdr);
  // Not posted: nothing went out and the sequence number is still free for post_send.
  if (!post_eager_now_locked(*l, hdr, t.data, bytes)) return false;
  ++*seq_counter;
  return true;
}

bool Engine::post_eager_now_locked(Link& l, uint8_t* hdr, const void* payload, size_t bytes) {
  if (!l.queue.empty() || l.flow || l.failed) return false;
  iovec iov[2] = {{hdr, kHeaderSize}, {const_cast<void*>(payload), bytes}};
  if (l.ep->send(std::span<const iovec>(iov, bytes ? 2 : 1)) != transport::PostStatus::Ok)
    return false;
  if (progress_sleeping_.load(std::memory_order_relaxed) && l.slot->tr->needs_progress())
    wake_progress_thread();
  return true;
}

void Engine::post_send(const GroupInfo& g, int dst, int tag, const Tensor& t,
                       const std::shared_ptr<Op>& op) {
  op->kind = Op::Kind::Send;
  op->group = g.id;
  set_group_name(*op, g);
  op->peer = dst;
  op->tag = tag;
  op->tensor = t;
  auto lk = lock_engine();
  if (shut_down_) throw AbortedError(op->describe() + ": the process group was destroyed");
  if (!dead_peers_.empty()) {
    auto dead = dead_peers_.find(dst);
    if (dead != dead_peers_.end())
      throw PeerError(op->describe() + ": rank " + std::to_string(dst) + " is " + dead->second);
  }
  // The link chosen before, without a call (link_for's first test); else link_for chooses.
  Link* l = chosen_link_locked(g.backend_id, dst);
  if (!l) l = link_for(lk, g.backend, dst, g.backend_id);
  uint64_t* seq_counter = seq_counter_locked(*l, g.id, dst, tag);
  op->link = l;
  Header h;
  h.group = g.id;
  h.src = opt_.rank;
  h.tag = tag;
  h.dtype = t.dtype;
  h.bytes = t.nbytes();
  if (h.bytes <= l->eager_limit) {
    op->seq = h.seq = (*seq_counter)++;
    uint8_t hdr[kHeaderSize];
    encode_header(h, hdr);
    op->stage = Op::Stage::Posted;
    // The latency path, else (no room, credits, a backlog, the peer failed) the general one,
    // which tries once more and queues or fails the send.
    if (post_eager_now_locked(*l, hdr, t.data, h.bytes)) {
      complete_locked(op);  // an eager send is done once the transport took it
      return;
    }
    send_msg_locked(*l, hdr, kHeaderSize, t.data, h.bytes, op);
    return;
  }
  h.type = MsgType::Rts;
  // Registration and the table may refuse (device memory, no room): the message takes its
  // sequence number only after them, so a refused send leaves no gap that would stall every
  // later message of this (group, peer, tag) at the receiver.
  op->mr = l->slot->tr->register_memory(t.data, h.bytes, t.device);
  op->stage = Op::Stage::Posted;
  ops_.add(op);
  op->seq = h.seq = (*seq_counter)++;
  if (l->slot->caps.tagged_data && h.bytes <= l->slot->caps.tagged_data_max) {
    // The transport matches the data itself: the RTS says under which id it comes, and the
    // data follows at once (the transport holds it until the receiver asks for it). The send
    // completes when the peer has taken the data; a refusal still comes back as a CTS.
    op->tagged = true;
    op->data_id = next_data_id_++ & 0x3fffffffu;
    if (op->data_id == 0) op->data_id = next_data_id_++ & 0x3fffffffu;
    op->stage = Op::Stage::Transfer;
    op->chunks_left = 1;
    uint8_t hdr[kRtsDataSize];
    encode_rts_data(h, Rts{op->id, op->data_id}, hdr);
    if (l->slot->caps.tagged_data_with_message && !l->flow) {
      // One transfer: the RTS rides with its data (over UCX, inside UCX's own RTS).
      send_tagged_locked(*l, op, {hdr, kRtsDataSize});
      return;
    }
    send_msg_locked(*l, hdr, kRtsDataSize, nullptr, 0, nullptr);
    send_tagged_locked(*l, op);
    return;
  }
  uint8_t hdr[kRtsSize];
  encode_rts(h, Rts{op->id}, hdr);
  send_msg_locked(*l, hdr, kRtsSize, nullptr, 0, nullptr);
}

void Engine::post_recv(const GroupInfo& g, int src, int tag, const Tensor& t,
                       const std::shared_ptr<Op>& op) {
  op->kind = Op::Kind::Recv;
  op->group = g.id;
  set_group_name(*op, g);
  op->peer = src;
  op->tag = tag;
  op->tensor = t;
  auto lk = lock_engine();
  if (shut_down_) throw AbortedError(op->describe() + ": the process group was destroyed");
  size_t bytes = t.nbytes();
  auto start = reinterpret_cast<uintptr_t>(t.data);
  if (bytes > 0) {
    if (const RangeSet::Range* clash = active_ranges_.overlap(start, start + bytes)) {
      auto* other = ops_.find(clash->id);
      throw InvalidArgument(op->describe() + ": its buffer [" + hex(t.data) + ", +" +
                            std::to_string(bytes) + " bytes) overlaps the buffer of a pending " +
                            (other ? (*other)->describe() : std::string("receive")) +
                            "; wait for that receive before posting another into the same memory");
    }
  }
  ops_.add(op);
  if (bytes > 0) {
    active_ranges_.insert(start, start + bytes, op->id);
    op->range_held = true;
  }
  op->stage = Op::Stage::Posted;
  uint64_t msg = matcher_.post(g.id, src, tag, op->id);
  if (msg) {
    on_match_locked(op, msg);
    return;
  }
  // A message that arrived before its sender went away still matches (above); nothing
  // more will come from a dead rank.
  auto dead = src == kAnySource || dead_peers_.empty() ? dead_peers_.end() : dead_peers_.find(src);
  if (dead != dead_peers_.end()) {
    std::string why = op->describe() + ": rank " + std::to_string(src) + " is " + dead->second;
    fail_locked(op, std::make_exception_ptr(PeerError(why)));
    throw PeerError(why);
  }
}

bool Engine::cancel(const std::shared_ptr<Op>& op, Deadline grace) {
  {
    auto lk = lock_engine();
    if (op->done.load(std::memory_order_relaxed)) return true;
    if (op->stage != Op::Stage::Transfer) {
      if (op->kind == Op::Kind::Send && op->link) {
        // A queued eager send refers to the caller's buffer: keep the message (its sequence
        // number is taken, the receiver expects it) but on a copy of the payload.
        for (Pending& p : op->link->queue) {
          if (p.is_put || p.op != op) continue;
          const auto* src = static_cast<const uint8_t*>(p.payload);
          p.owned.assign(src, src + p.payload_len);
          p.payload = p.owned.data();
          p.op = nullptr;
        }
      }
      fail_locked(op, std::make_exception_ptr(AbortedError(op->describe() + " was cancelled")));
      return true;
    }
  }
  // Stage::Transfer: a put is in flight to or from this buffer; it ends by itself (or fails
  // with its peer).
  try {
    wait(*op, grace);
  } catch (const TimeoutError&) {
    TPLOG(WARN, P2P) << "rank " << opt_.rank << ": cancelling " << op->describe()
                     << ": its data is still moving; the buffer may still be accessed";
    return false;
  } catch (const std::exception&) {
  }
  return true;
}

std::string Engine::peer_failure(int peer) {
  auto lk = lock_engine();
  auto it = dead_peers_.find(peer);
  if (it != dead_peers_.end()) return it->second;
  std::string why = watch_->failure(peer);
  if (!why.empty()) fail_peer_locked(peer, why);
  return why;
}

std::vector<Engine::Unmatched> Engine::unmatched(uint64_t group) {
  auto lk = lock_engine();
  std::vector<Unmatched> out;
  for (uint64_t id : matcher_.messages_in_group(group)) {
    auto it = incoming_.find(id);
    if (it != incoming_.end())
      out.push_back({it->second->h.src, it->second->h.tag, it->second->h.bytes});
  }
  return out;
}

// ---- arrivals ----------------------------------------------------------------------------

void Engine::handle_message(Slot& s, int peer, std::span<const uint8_t> data) {
  try {
    handle_message_unguarded(s, peer, data);
  } catch (const NotSupportedError& e) {
    // Tagged data (RtsData) over a transport that cannot receive it: only a peer of another
    // build or a corrupt stream sends that. The link goes, not the progress loop.
    fail_peer_locked(peer, "rank " + std::to_string(peer) + " sent a message the " + s.name +
                               " transport cannot take: " + e.what());
  }
}

void Engine::handle_message_unguarded(Slot& s, int peer, std::span<const uint8_t> data) {
  // The latency path: an eager message whose receive is posted already, on a transport
  // without credits. It skips the full decode and the general matching; the receive
  // completes with the bytes copied from the transport's buffer (on_match_locked checks the
  // dtype and size as for any match).
  Header fh;
  if (s.caps.recv_slots == 0 && parse_eager(data, peer, &fh) &&
      (removed_groups_.empty() || !removed_groups_.count(fh.group))) {
    if (uint64_t recv = matcher_.arrive_posted(ChannelKey{fh.group, fh.src, fh.tag}, fh.seq)) {
      auto* found = ops_.find(static_cast<uint32_t>(recv));
      if (found && fh.dtype == (*found)->tensor.dtype && fh.bytes <= (*found)->tensor.nbytes()) {
        // What on_match_locked does for an eager message that fits: copy and complete.
        Op& op = **found;
        op.source = fh.src;
        copy_small(op.tensor.data, data.data() + kHeaderSize, fh.bytes);
        op.received = fh.bytes;
        ++next_msg_id_;
        complete_locked(*found);
        return;
      }
      Incoming local{fh, Rts{}, &s, {}, data.subspan(kHeaderSize), false};
      uint64_t id = next_msg_id_++;
      current_ = {id, &local};
      if (auto* op = ops_.find(static_cast<uint32_t>(recv))) on_match_locked(*op, id);
      current_ = {};
      return;
    }
  }
  std::string err;
  auto d = decode(data, peer, &err);
  if (!d) {
    TPLOG(WARN, P2P) << "rank " << opt_.rank << ": " << err << "; closing the link";
    fail_peer_locked(peer, err);
    return;
  }
  const Header& h = d->header;
  Link* l = s.caps.recv_slots > 0 ? link_locked(s, peer) : nullptr;
  if (l) {
    if (h.credits > l->slots || l->credits + h.credits > l->slots) {
      fail_peer_locked(peer, "rank " + std::to_string(peer) + " returned " +
                                 std::to_string(h.credits) + " credits, more than it was given");
      return;
    }
    l->credits += h.credits;
    if (h.credits && !l->queue.empty()) backlog_.insert(l);
  }
  switch (h.type) {
    case MsgType::Credit:
      break;
    case MsgType::Cts:
      handle_cts_locked(*link_locked(s, peer), *d);
      break;
    case MsgType::Eager:
    case MsgType::Rts:
    case MsgType::RtsData: {
      if (removed_groups_.count(h.group)) {
        TPLOG(INFO, P2P) << "rank " << opt_.rank << ": dropped a message from rank " << peer
                         << " for a destroyed group";
        if (h.type == MsgType::RtsData) discard_tagged_locked(s, h, d->rts);
        break;
      }
      // Most messages find their receive already posted: keep the record on the stack and
      // move it to the heap only when it has to wait.
      Incoming local{h, d->rts, &s, {}, d->payload, false};
      uint64_t id = next_msg_id_++;
      current_ = {id, &local};
      std::vector<Match> matches;
      matches.swap(match_scratch_);
      matches.clear();
      if (!matcher_.arrive(ChannelKey{h.group, h.src, h.tag}, h.seq, id, &matches)) {
        current_ = {};
        match_scratch_.swap(matches);
        fail_peer_locked(peer, "rank " + std::to_string(peer) + " sent sequence number " +
                                   std::to_string(h.seq) + " twice (group " +
                                   group_name_locked(h.group) + ", tag " + std::to_string(h.tag) +
                                   ")");
        return;
      }
      bool self_matched = false;
      for (const Match& m : matches) {
        if (m.msg_id == id) self_matched = true;
        // By reference into the table: on_match_locked does not post, so the table does not
        // grow under it, and complete_locked keeps the op alive while it removes it.
        if (auto* op = ops_.find(static_cast<uint32_t>(m.recv_id))) on_match_locked(*op, m.msg_id);
      }
      match_scratch_.swap(matches);
      current_ = {};
      if (!self_matched) {
        // Out of the bounce buffer (and off the stack) before it is reposted.
        auto* kept = new Incoming{local.h, local.rts, local.slot, {}, {}, true};
        kept->payload.assign(local.view.begin(), local.view.end());
        kept->view = kept->payload;
        incoming_[id] = kept;
      }
      break;
    }
  }
  if (l && !l->failed) {
    ++l->owed;
    credit_due_.push_back(l);  // returned once the transport has reposted the buffer
  }
}

void Engine::on_match_locked(const std::shared_ptr<Op>& recv, uint64_t msg_id) {
  Incoming* in;
  if (current_.first == msg_id && current_.second) {
    in = current_.second;  // the message being handled, still in its bounce buffer
    current_.second = nullptr;
  } else {
    auto it = incoming_.find(msg_id);
    if (it == incoming_.end()) return;
    in = it->second;
    incoming_.erase(it);
  }
  std::unique_ptr<Incoming> owner(in->heap ? in : nullptr);
  const Header& h = in->h;
  recv->source = h.src;
  uint32_t refuse = kCtsOk;
  std::exception_ptr err;
  if (h.dtype != recv->tensor.dtype || h.bytes > recv->tensor.nbytes()) {
    // Only now: building these strings costs more than the whole fast path.
    std::string sent =
        "rank " + std::to_string(h.src) + " sent " + describe_bytes(h.dtype, h.bytes);
    if (h.dtype != recv->tensor.dtype) {
      refuse = kCtsDTypeMismatch;
      err = std::make_exception_ptr(MismatchError(recv->describe() + ": " + sent +
                                                  "; the dtypes differ. Sender and receiver "
                                                  "must use the same dtype."));
    } else {
      refuse = kCtsTooSmall;
      err = std::make_exception_ptr(
          InvalidArgument(recv->describe() + ": " + sent + ", more than the " +
                          std::to_string(recv->tensor.nbytes()) + "-byte receive buffer holds."));
    }
  }
  if (refuse != kCtsOk) {
    std::string reason;
    try {
      std::rethrow_exception(err);
    } catch (const std::exception& e) {
      reason = e.what();
    }
    fail_locked(recv, err);
    if (h.type == MsgType::Rts || h.type == MsgType::RtsData) {
      Cts c;
      c.send_id = in->rts.send_id;
      c.status = refuse;
      c.reason = reason.substr(0, kMaxReason);
      Link& l = *link_locked(*in->slot, h.src);
      if (h.type == MsgType::RtsData) {
        refuse_tagged_locked(l, h, c, in->rts);
      } else {
        send_cts_locked(l, h, c);
      }
    }
    return;
  }
  if (h.type == MsgType::Eager) {
    copy_small(recv->tensor.data, in->view.data(), h.bytes);
    recv->received = h.bytes;
    complete_locked(recv);
    return;
  }
  start_rendezvous_recv_locked(recv, *in);
}

void Engine::start_rendezvous_recv_locked(const std::shared_ptr<Op>& recv, Incoming& in) {
  Link* l = link_locked(*in.slot, in.h.src);
  Cts c;
  c.send_id = in.rts.send_id;
  bool tagged = in.h.type == MsgType::RtsData;
  try {
    recv->mr = in.slot->tr->register_memory(recv->tensor.data, in.h.bytes, recv->tensor.device);
  } catch (const std::exception& e) {
    c.status = kCtsOther;
    c.reason = std::string("rank ") + std::to_string(opt_.rank) +
               " cannot register its receive buffer: " + e.what();
    c.reason.resize(std::min(c.reason.size(), kMaxReason));
    fail_locked(recv, std::current_exception());
    if (tagged) {
      refuse_tagged_locked(*l, in.h, c, in.rts);
    } else {
      send_cts_locked(*l, in.h, c);
    }
    return;
  }
  if (tagged) {
    // The data is on its way (or held by the transport already): receive it straight into
    // the buffer; its arrival is reported like a put's notification (imm = the receive's id).
    recv->link = l;
    recv->tagged = true;
    recv->data_id = in.rts.data_id;
    recv->chunks_left = 1;
    recv->received = in.h.bytes;
    recv->stage = Op::Stage::Transfer;
    if (l->failed) {
      // An RTS that arrived before its sender was lost: its data never will.
      auto dead = dead_peers_.find(in.h.src);
      fail_locked(recv, std::make_exception_ptr(PeerError(
                            recv->describe() + " failed: rank " + std::to_string(in.h.src) +
                            " is " + (dead == dead_peers_.end() ? "gone" : dead->second))));
      return;
    }
    in.slot->tr->recv_tagged(in.h.src, in.rts.data_id, *recv->mr, 0, in.h.bytes, recv->id);
    return;
  }
  uint64_t chunk = std::min<uint64_t>(in.slot->caps.max_put, in.h.bytes);
  recv->link = l;
  recv->chunks_left = static_cast<uint32_t>((in.h.bytes + chunk - 1) / chunk);
  recv->received = in.h.bytes;
  recv->stage = Op::Stage::Transfer;
  c.recv_id = recv->id;
  c.chunk = chunk;
  c.key = recv->mr->remote_key();
  send_cts_locked(*l, in.h, c);
}

void Engine::send_cts_locked(Link& l, const Header& req, const Cts& c) {
  Header h = req;
  h.type = MsgType::Cts;
  h.src = opt_.rank;
  h.credits = 0;
  uint8_t hdr[kMaxCtsSize];
  size_t n = encode_cts(h, c, hdr);
  send_msg_locked(l, hdr, n, nullptr, 0, nullptr);
}

void Engine::discard_tagged_locked(Slot& s, const Header& h, const Rts& r) {
  if (dead_peers_.count(h.src)) return;
  s.tr->discard_tagged(h.src, r.data_id);
}

void Engine::refuse_tagged_locked(Link& l, const Header& h, const Cts& c, const Rts& r) {
  // The refusal goes first: the sender's data send completes once its data is dropped here,
  // and must find the refusal already recorded. A CTS left in the queue (back-pressure, or
  // earlier messages waiting) takes the drop along behind it.
  send_cts_locked(l, h, c);
  if (l.queue.empty()) {
    discard_tagged_locked(*l.slot, h, r);
    return;
  }
  Pending p;
  p.is_discard = true;
  p.data_id = r.data_id;
  l.queue.push_back(std::move(p));
  backlog_.insert(&l);
}

void Engine::handle_cts_locked(Link& l, const Decoded& d) {
  const Cts& c = d.cts;
  auto* found = ops_.find(c.send_id);
  if (found && (*found)->tagged && (*found)->kind == Op::Kind::Send && (*found)->peer == l.peer &&
      (*found)->stage == Op::Stage::Transfer && c.status != kCtsOk) {
    // A refused tagged send: its data is moving (the receiver drops it), so the buffer stays
    // in use until the transport reports the send done; the op then completes with this error.
    Op& op = **found;
    std::string msg =
        op.describe() + ": rank " + std::to_string(l.peer) + " refused the message: " + c.reason;
    if (!op.error) {
      if (c.status == kCtsDTypeMismatch)
        op.error = std::make_exception_ptr(MismatchError(msg));
      else if (c.status == kCtsTooSmall)
        op.error = std::make_exception_ptr(InvalidArgument(msg));
      else
        op.error = std::make_exception_ptr(PeerError(msg));
    }
    return;
  }
  auto* it = found;
  if (!it || (*it)->kind != Op::Kind::Send || (*it)->peer != l.peer ||
      (*it)->stage != Op::Stage::Posted) {
    TPLOG(INFO, P2P) << "rank " << opt_.rank << ": ignored a CTS from rank " << l.peer
                     << " for no pending send (id " << c.send_id << ")";
    return;
  }
  std::shared_ptr<Op> op = *it;
  if (c.status != kCtsOk) {
    std::string msg =
        op->describe() + ": rank " + std::to_string(l.peer) + " refused the message: " + c.reason;
    if (c.status == kCtsDTypeMismatch)
      fail_locked(op, std::make_exception_ptr(MismatchError(msg)));
    else if (c.status == kCtsTooSmall)
      fail_locked(op, std::make_exception_ptr(InvalidArgument(msg)));
    else
      fail_locked(op, std::make_exception_ptr(PeerError(msg)));
    return;
  }
  uint64_t bytes = op->tensor.nbytes();
  if (op->link->slot != l.slot || c.key.length < bytes || c.chunk == 0) {
    fail_peer_locked(l.peer, "rank " + std::to_string(l.peer) +
                                 " answered with an unusable CTS (region of " +
                                 std::to_string(c.key.length) + " bytes for a " +
                                 std::to_string(bytes) + "-byte message)");
    return;
  }
  op->stage = Op::Stage::Transfer;
  op->chunks_left = static_cast<uint32_t>((bytes + c.chunk - 1) / c.chunk);
  for (uint64_t off = 0; off < bytes; off += c.chunk)
    send_put_locked(l, op, off, std::min<uint64_t>(c.chunk, bytes - off), c.key, c.recv_id);
}

void Engine::handle_put_arrived(Slot& s, int peer, uint32_t imm) {
  Link* l = s.caps.recv_slots > 0 ? link_locked(s, peer) : nullptr;
  auto* it = ops_.find(imm);
  if (!it || (*it)->kind != Op::Kind::Recv || (*it)->stage != Op::Stage::Transfer || !(*it)->link ||
      (*it)->link->peer != peer) {
    TPLOG(WARN, P2P) << "rank " << opt_.rank << ": a put from rank " << peer
                     << " notified unknown receive " << imm;
  } else {
    std::shared_ptr<Op> op = *it;
    if (--op->chunks_left == 0) complete_locked(op);
  }
  if (l && !l->failed) {
    ++l->owed;
    credit_due_.push_back(l);  // returned once the transport has reposted the buffer
  }
}

void Engine::handle_put_done(Slot& s, uint64_t cookie, bool ok) {
  auto* it = ops_.find(static_cast<uint32_t>(cookie));
  if (!it || (*it)->kind != Op::Kind::Send) return;
  std::shared_ptr<Op> op = *it;
  if (!ok && op->tagged && op->error) {
    // A refused tagged send whose dropped data the transport reports as failed (a truncated
    // receive): the refusal's error is the one to report.
    complete_locked(op);
    return;
  }
  if (!ok) {
    fail_locked(
        op, std::make_exception_ptr(PeerError(op->describe() + ": the " + s.name + " put to rank " +
                                              std::to_string(op->peer) + " failed")));
    return;
  }
  if (op->chunks_left > 0 && --op->chunks_left == 0) complete_locked(op);
}

void Engine::handle_peer_error(Slot& s, int peer, const std::string& reason) {
  // Transports that name themselves already ("shm: ...") are not named twice.
  fail_peer_locked(peer, reason.starts_with(s.name + ": ") ? reason : s.name + ": " + reason);
}

// ---- completion -----------------------------------------------------------------------

void Engine::complete_locked(const std::shared_ptr<Op>& op_ref) {
  Op* op = op_ref.get();
  if (op->done.load(std::memory_order_relaxed)) return;
  // The table's reference (op_ref may be that very pointer) lives until the end of this call.
  std::shared_ptr<Op> held = op->id ? ops_.take(op->id, op) : nullptr;
  op->stage = Op::Stage::Done;
  op->mr.reset();
  if (op->range_held) {
    active_ranges_.erase(reinterpret_cast<uintptr_t>(op->tensor.data));
    op->range_held = false;
  }
  // Release is enough: spinning waiters only read `done`; a sleeping waiter counts itself in
  // sleepers_ before it takes the engine lock (which we hold) to check `done` and sleep, so
  // either it sees `done` under the lock or we see its count here. No full fence: on the
  // send path it would wait for the record to reach the peer's cache.
  op->done.store(true, std::memory_order_release);
  if (sleepers_.load(std::memory_order_relaxed) > 0) done_cv_.notify_all();
  // The table's reference is dropped by the next progress round (an atomic decrement that
  // would otherwise sit between an arrival and the reply).
  if (held) retired_.push_back(std::move(held));
}

void Engine::fail_locked(const std::shared_ptr<Op>& op, std::exception_ptr e) {
  if (op->done.load(std::memory_order_relaxed)) return;
  if (op->kind == Op::Kind::Recv && op->stage == Op::Stage::Posted) {
    ChannelKey where{op->group, op->peer, op->tag};
    matcher_.cancel(op->id, &where);
  }
  op->error = std::move(e);
  complete_locked(op);
}

void Engine::fail_peer_locked(int peer, const std::string& why, bool silent) {
  if (dead_peers_.count(peer)) return;
  // The verdict first ("rank 3 is dead: ...", "rank 3 is unresponsive: ..."), as the liveness
  // watch words its own; then the peer's host (known once we ever talked to it): which machine
  // to look at.
  std::string reason = why;
  if (!why.starts_with("dead: ") && !why.starts_with("unresponsive: "))
    reason = (silent ? "unresponsive: " : "dead: ") + why;
  if (why.find(" on host '") == std::string::npos) {
    std::lock_guard<std::mutex> ck(cache_mu_);
    auto h = host_cache_.find(peer);
    if (h != host_cache_.end())
      reason += " [rank " + std::to_string(peer) + " runs on host '" + h->second + "']";
  }
  watch_->mark(peer, reason);
  dead_peers_[peer] = reason;
  TPLOG(WARN, P2P) << "rank " << opt_.rank << ": lost rank " << peer << ": " << reason;
  auto err = [&](const Op& op) {
    return std::make_exception_ptr(
        PeerError(op.describe() + " failed: rank " + std::to_string(peer) + " is " + reason));
  };
  for (auto& [key, l] : links_) {
    if (l->peer != peer) continue;
    l->failed = true;
    for (Pending& p : l->queue)
      if (p.op) fail_locked(p.op, err(*p.op));
    l->queue.clear();
    backlog_.erase(l.get());
  }
  for (auto& op : ops_.snapshot()) {
    bool involved = op->peer == peer ||
                    (op->stage == Op::Stage::Transfer && op->link && op->link->peer == peer);
    if (involved) fail_locked(op, err(*op));
  }
}

}  // namespace tpcomm::p2p
