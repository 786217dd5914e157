// EngineComm: the collectives' point-to-point interface on the p2p engine.
#include "pg/engine_comm.h"

#include <sched.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "core/log.h"
#include "tpcomm/error.hpp"

namespace tpcomm::detail {
namespace {

// One posted engine operation. Destroying it while pending cancels it (CollComm contract).
struct EngineReq : coll::RequestState {
  std::shared_ptr<p2p::Engine> engine;
  std::shared_ptr<p2p::Op> op;
  bool send = false;
  size_t bytes = 0;
  int peer = 0;  // group rank
  int tag = 0;   // the algorithm's tag
  std::chrono::milliseconds grace{0};

  ~EngineReq() override {
    if (!op || op->done.load(std::memory_order_acquire)) return;  // (null: posting failed)
    try {
      engine->cancel(op, Deadline::after(grace));
    } catch (...) {
    }
  }
};

EngineReq* state_of(coll::Request& r) { return static_cast<EngineReq*>(r.state()); }

}  // namespace

std::string EngineComm::where() const {
  std::ostringstream os;
  os << c_.op << " #" << c_.seq << " on group '" << c_.group_name << "' (rank " << c_.rank << " of "
     << size() << ")";
  return os.str();
}

coll::Request EngineComm::post(bool send, void* buf, size_t bytes, int peer, int tag) {
  if (peer < 0 || peer >= size() || peer == c_.rank || tag < 0 || tag > kMaxAlgoTag)
    throw InvalidArgument(where() + ": internal error: the algorithm addressed rank " +
                          std::to_string(peer) + " with tag " + std::to_string(tag));
  int engine_tag = static_cast<int>(((c_.seq % kSeqWindow) << 16) | static_cast<uint64_t>(tag));
  Tensor t = Tensor::raw(buf, static_cast<int64_t>(bytes), DType::UInt8);
  int global = c_.channel->ranks[peer];
  auto st = std::make_unique<EngineReq>();
  st->engine = c_.engine;
  st->send = send;
  st->bytes = bytes;
  st->peer = peer;
  st->tag = tag;
  st->grace = c_.cancel_grace;
  ++posted_;
  try {
    st->op = send ? c_.engine->post_send(*c_.channel, global, engine_tag, t)
                  : c_.engine->post_recv(*c_.channel, global, engine_tag, t);
  } catch (const PeerError& e) {
    throw PeerError(where() + ": " + e.what() + lost_members());
  } catch (const AbortedError& e) {
    throw AbortedError(where() + ": " + e.what());
  }
  return coll::Request(std::move(st));
}

coll::Request EngineComm::isend(const void* buf, size_t bytes, int peer, int tag) {
  return post(true, const_cast<void*>(buf), bytes, peer, tag);
}

coll::Request EngineComm::irecv(void* buf, size_t bytes, int peer, int tag) {
  return post(false, buf, bytes, peer, tag);
}

void EngineComm::finish(coll::Request& req) {
  EngineReq* s = state_of(req);
  std::exception_ptr err = s->op->error;
  std::string what = std::string(s->send ? "send to" : "receive from") + " rank " +
                     std::to_string(s->peer) + " (algorithm tag " + std::to_string(s->tag) + ")";
  if (!err && !s->send && s->op->received != s->bytes) {
    std::string msg = where() + ": " + what + ": rank " + std::to_string(s->peer) + " sent " +
                      std::to_string(s->op->received) + " bytes, rank " + std::to_string(c_.rank) +
                      " expected " + std::to_string(s->bytes) + "; every rank must call " + c_.op +
                      " with matching sizes";
    req.reset();
    throw MismatchError(msg);
  }
  req.reset();
  if (!err) return;
  std::string pre = where() + ": " + what + ": ";
  try {
    std::rethrow_exception(err);
  } catch (const InvalidArgument& e) {
    // The engine refuses a message larger than the receive buffer.
    throw MismatchError(pre + e.what() + "; every rank must call " + c_.op +
                        " with matching sizes");
  } catch (const MismatchError& e) {
    throw MismatchError(pre + e.what());
  } catch (const PeerError& e) {
    throw PeerError(pre + e.what() + lost_members());
  } catch (const AbortedError& e) {
    throw AbortedError(pre + e.what());
  } catch (const TimeoutError& e) {
    throw TimeoutError(pre + e.what());
  } catch (const TransportError& e) {
    throw TransportError(pre + e.what());
  }
}

void EngineComm::wait(coll::Request& req) {
  if (req.empty()) return;
  EngineReq* s = state_of(req);
  auto describe = [&] {
    return std::string(s->send ? "send to" : "receive from") + " rank " + std::to_string(s->peer) +
           " (algorithm tag " + std::to_string(s->tag) + ")";
  };
  // In slices, so that a member lost meanwhile (its link failed, its process exited) fails the
  // call at once with its name, even when this rank waits for another, stuck, member.
  for (;;) {
    Deadline slice = c_.deadline;
    bool last = c_.deadline.remaining() <= kLostCheck;
    if (!last) slice = Deadline::after(kLostCheck);
    try {
      c_.engine->wait(*s->op, slice);
      break;
    } catch (const TimeoutError& e) {
      check_members();
      if (last)
        throw TimeoutError(where() + " timed out waiting for the " + describe() + ": " + e.what());
    } catch (const std::exception&) {
      break;  // the op finished with an error: reported with context below
    }
  }
  finish(req);
}

std::string EngineComm::lost_members() const {
  std::string out;
  for (int m = 0; m < size(); ++m) {
    if (m == c_.rank) continue;
    std::string why = c_.engine->peer_failure(c_.channel->ranks[m]);
    if (!why.empty())
      out += "; rank " + std::to_string(m) + " of the group (global rank " +
             std::to_string(c_.channel->ranks[m]) + ") is gone: " + why;
  }
  return out.empty() ? out : ". Lost members" + out;
}

void EngineComm::check_members() const {
  std::string lost = lost_members();
  if (!lost.empty()) throw PeerError(where() + " cannot complete" + lost);
}

bool EngineComm::test(coll::Request& req) {
  if (req.empty()) return true;
  if (!c_.engine->test(*state_of(req)->op)) return false;
  finish(req);
  return true;
}

int EngineComm::wait_any(std::span<coll::Request* const> reqs) {
  bool any = false;
  for (coll::Request* r : reqs) any = any || (r != nullptr && !r->empty());
  if (!any) return -1;
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now(), last_check = start;
  for (unsigned round = 0;; ++round) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      coll::Request* r = reqs[i];
      if (r != nullptr && !r->empty() && test(*r)) return static_cast<int>(i);
    }
    if ((round & 15) != 15) continue;
    auto now = Clock::now();
    if (now - last_check > kLostCheck) {
      check_members();
      last_check = now;
    }
    if (now >= c_.deadline.when()) {
      std::string pending;
      for (coll::Request* r : reqs) {
        if (r == nullptr || r->empty()) continue;
        EngineReq* s = state_of(*r);
        pending += std::string(pending.empty() ? "" : ", ") + (s->send ? "send to" : "recv from") +
                   " rank " + std::to_string(s->peer) + " (tag " + std::to_string(s->tag) + ")";
      }
      throw TimeoutError(where() + " timed out waiting for any of: " + pending +
                         "; are those ranks alive and calling the same collective?");
    }
    // Spin briefly, then leave the core to the other ranks (oversubscribed runs).
    auto waited = now - start;
    if (waited > std::chrono::milliseconds(2))
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    else if (waited > std::chrono::microseconds(50))
      sched_yield();
  }
}

}  // namespace tpcomm::detail
