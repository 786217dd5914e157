// EngineComm: the collectives' point-to-point interface on the p2p engine.
#include "pg/engine_comm.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <sstream>
#include <thread>
#include <vector>

#include "core/config.h"
#include "core/log.h"
#include "tpcomm/error.hpp"

namespace tpcomm::detail {
namespace {

// The per-thread free lists of the requests' memory and Ops (a collective's requests begin
// and end on the thread that runs it): a small collective allocates nothing for its messages.
// The hot path reads one trivially initialised thread-local; the lists are made on a thread's
// first collective message and freed at its exit (later releases then free directly).
constexpr size_t kPoolMax = 32;
struct ReqPool {
  std::vector<void*> blocks;                  // EngineReq-sized memory
  std::vector<std::shared_ptr<p2p::Op>> ops;  // reset Ops that nothing else refers to
  ~ReqPool() {
    for (void* p : blocks) ::operator delete(p);
  }
};
struct ReqPoolRef {
  ReqPool* pool;
  bool gone;
};
thread_local constinit ReqPoolRef t_pool{nullptr, false};
struct ReqPoolOwner {
  ReqPool pool;
  ReqPoolOwner() {
    pool.blocks.reserve(kPoolMax);
    pool.ops.reserve(kPoolMax);
    t_pool.pool = &pool;
  }
  ~ReqPoolOwner() {
    t_pool.pool = nullptr;
    t_pool.gone = true;
  }
};
ReqPool* this_thread_pool() {
  ReqPoolRef& r = t_pool;
  if (r.pool || r.gone) return r.pool;
  thread_local ReqPoolOwner owner;  // constructed here, once per thread
  return r.pool;
}

// One posted engine operation. Destroying it while pending cancels it (CollComm contract).
// Its memory and its Op go back to this thread's pool.
struct EngineReq final : coll::RequestState {
  p2p::Engine* engine = nullptr;  // the call's (its CollCall keeps it alive)
  std::shared_ptr<p2p::Op> op;    // posted (null: posting failed)
  bool send = false;
  size_t bytes = 0;
  int peer = 0;  // group rank
  int tag = 0;   // the algorithm's tag
  std::chrono::milliseconds grace{0};

  ~EngineReq() override {
    if (!op) return;
    if (!op->done.load(std::memory_order_acquire)) {
      try {
        engine->cancel(op, Deadline::after(grace));
      } catch (...) {
      }
    }
    // Kept for reuse once the engine no longer refers to it (a completed receive stays in
    // its table until the next progress round; a cancelled one whose data was still moving,
    // longer): fresh_op() takes only ops that nothing else holds.
    ReqPool* p = t_pool.pool;
    if (p && p->ops.size() < kPoolMax) p->ops.push_back(std::move(op));
  }

  static void* operator new(size_t n) {
    ReqPool* p = this_thread_pool();
    if (n == sizeof(EngineReq) && p && !p->blocks.empty()) {
      void* b = p->blocks.back();
      p->blocks.pop_back();
      return b;
    }
    return ::operator new(n);
  }
  static void operator delete(void* b, size_t n) {
    ReqPool* p = t_pool.pool;
    if (n == sizeof(EngineReq) && p && p->blocks.size() < kPoolMax) {
      p->blocks.push_back(b);
      return;
    }
    ::operator delete(b);
  }
};

// A fresh Op: one of this thread's pool that nothing else refers to any more (among the
// last few released), else a new one.
std::shared_ptr<p2p::Op> fresh_op() {
  if (ReqPool* p = t_pool.pool) {
    auto& ops = p->ops;
    const size_t stop = ops.size() > 4 ? ops.size() - 4 : 0;
    for (size_t i = ops.size(); i-- > stop;) {
      if (ops[i].use_count() != 1) continue;
      // The engine's last reference went with a release decrement: see its writes first.
      std::atomic_thread_fence(std::memory_order_acquire);
      std::shared_ptr<p2p::Op> op = std::move(ops[i]);
      ops[i] = std::move(ops.back());
      ops.pop_back();
      op->reset();
      return op;
    }
  }
  return std::make_shared<p2p::Op>();
}

EngineReq* state_of(coll::Request& r) { return static_cast<EngineReq*>(r.state()); }

const char* const kOps[] = {"",
                            "broadcast",
                            "all_reduce",
                            "reduce",
                            "all_gather",
                            "all_gather_into_tensor",
                            "gather",
                            "scatter",
                            "reduce_scatter",
                            "reduce_scatter_tensor",
                            "all_to_all",
                            "all_to_all_single",
                            "barrier"};
constexpr uint32_t kNumOps = sizeof(kOps) / sizeof(kOps[0]);

}  // namespace

uint32_t op_code(const char* op) {
  for (uint32_t i = 1; i < kNumOps; ++i)
    if (std::string_view(op) == kOps[i]) return i;
  return 0;
}

const char* op_of_code(uint32_t code) { return code < kNumOps ? kOps[code] : "?"; }

std::string lost_key(uint64_t seq) { return "coll/lost/" + std::to_string(seq); }

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
  int engine_tag =
      static_cast<int>(sig_ | ((c_.seq % kSeqWindow) << 16) | static_cast<uint64_t>(tag));
  Tensor t = Tensor::raw(buf, static_cast<int64_t>(bytes), DType::UInt8);
  int global = c_.channel->ranks[peer];
  auto st = std::make_unique<EngineReq>();
  st->engine = c_.engine.get();
  st->send = send;
  st->bytes = bytes;
  st->peer = peer;
  st->tag = tag;
  st->grace = c_.cancel_grace;
  ++posted_;
  std::shared_ptr<p2p::Op> op = fresh_op();
  try {
    if (send)
      c_.engine->post_send(*c_.channel, global, engine_tag, t, op);
    else
      c_.engine->post_recv(*c_.channel, global, engine_tag, t, op);
  } catch (const PeerError& e) {
    std::string n = notice();
    throw PeerError(where() + ": " + e.what() + lost_members() +
                    (n.empty() ? "" : ". First loss: " + n));
  } catch (const AbortedError& e) {
    throw AbortedError(where() + ": " + e.what());
  }
  st->op = std::move(op);
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
  // What an error needs, read before the state goes back to the pool; the message strings
  // are built only for an error.
  std::exception_ptr err = std::move(s->op->error);
  const uint64_t received = s->op->received;
  const bool send = s->send;
  const size_t bytes = s->bytes;
  const int peer = s->peer, tag = s->tag;
  req.reset();
  if (!err && (send || received == bytes)) return;
  const std::string what = std::string(send ? "send to" : "receive from") + " rank " +
                           std::to_string(peer) + " (algorithm tag " + std::to_string(tag) + ")";
  if (!err) {
    throw MismatchError(where() + ": " + what + ": rank " + std::to_string(peer) + " sent " +
                        std::to_string(received) + " bytes, rank " + std::to_string(c_.rank) +
                        " expected " + std::to_string(bytes) + "; every rank must call " + c_.op +
                        " with matching sizes");
  }
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
    // A member lost in a cascade (it left after its own call failed) names the first loss
    // through its notice.
    std::string n = notice();
    throw PeerError(pre + e.what() + lost_members() + (n.empty() ? "" : ". First loss: " + n));
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
  // An eager send is done before anyone waits: no clock read, no wait.
  if (s->op->done.load(std::memory_order_acquire)) return finish(req);
  auto describe = [&] {
    return std::string(s->send ? "send to" : "receive from") + " rank " + std::to_string(s->peer) +
           " (algorithm tag " + std::to_string(s->tag) + ")";
  };
  // In slices, so that a member lost meanwhile (its link failed, its process exited) fails the
  // call at once with its name, even when this rank waits for another, stuck, member. While
  // the call's deadline is far (by the coarse clock, with a margin for its tick), a slice is
  // kLostCheck from the engine's first clock reading, which a wait that ends within a few
  // rounds (the latency path) never takes; near it, the slices end exactly at the deadline.
  constexpr auto kMargin = std::chrono::milliseconds(50);
  for (;;) {
    const bool far = c_.deadline.is_never() ||
                     c_.deadline.when() - Deadline::coarse_now() > kLostCheck + kMargin;
    bool last = false;
    try {
      if (far) {
        c_.engine->wait(*s->op, kLostCheck);
      } else {
        Deadline slice = c_.deadline;
        last = c_.deadline.remaining() <= kLostCheck;
        if (!last) slice = Deadline::after(kLostCheck);
        c_.engine->wait(*s->op, slice);
      }
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
             std::to_string(c_.channel->ranks[m]) + ") is " + why;
  }
  return out.empty() ? out : ". Lost members" + out;
}

void EngineComm::check_members() const {
  std::string lost = lost_members();
  if (!lost.empty()) {
    std::string n = notice();
    throw PeerError(where() + " cannot complete" + lost + (n.empty() ? "" : ". First loss: " + n));
  }
  // Another member may have lost one we have no link to, or found that the members disagree
  // (a slow path: one store look-up per check, after the call has waited kLostCheck).
  std::string n;
  try {
    n = notice(true);
  } catch (const TimeoutError& e) {
    // The store's server did not answer: its process may be a member that stopped, which the
    // liveness watch names by now.
    lost = lost_members();
    if (!lost.empty()) throw PeerError(where() + " cannot complete" + lost);
    throw TimeoutError(where() + " has waited " + std::to_string(kLostCheck.count()) +
                       " ms; the group's store did not answer when asked whether the other "
                       "members are alive: " +
                       e.what());
  } catch (const StoreError& e) {
    throw StoreError(where() + " has waited " + std::to_string(kLostCheck.count()) +
                     " ms and cannot reach the group's store to learn whether the other members "
                     "are alive: " +
                     e.what() +
                     ". The store's server (rank 0's process, tpstore or tprun) is gone or "
                     "unreachable; the job cannot go on: restart it");
  }
  const std::string_view mismatch = kMismatchNotice;
  if (n.compare(0, mismatch.size(), mismatch) == 0)
    throw MismatchError(where() + ": " + n.substr(mismatch.size()));
  if (!n.empty()) throw PeerError(where() + " cannot complete: " + n);
  std::string foreign = foreign_calls();
  if (!foreign.empty()) throw MismatchError(foreign);
}

void EngineComm::sign(DType dtype, int64_t count, int root, int redop) {
  if (rec_) {
    rec_->dtype = static_cast<uint8_t>(dtype);
    rec_->count = count;
    rec_->root = root;
    rec_->redop = static_cast<int16_t>(redop);
  }
  if (!c_.check_signature) return;
  // Integer mixing only: this runs on every call.
  uint64_t h = static_cast<uint64_t>(count) * 0x9E3779B97F4A7C15ull;
  h ^= (static_cast<uint64_t>(dtype) << 48) ^ (static_cast<uint64_t>(root + 1) << 24) ^
       static_cast<uint64_t>(redop + 1);
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  h ^= h >> 17;
  sig_ = (sig_ & ~(0x7Fu << kArgShift)) | (static_cast<uint32_t>(h & 0x7F) << kArgShift);
  signed_dtype_ = dtype;
  signed_count_ = count;
  signed_root_ = root;
  signed_redop_ = redop;
}

void EngineComm::on_failure(std::exception_ptr error) {
  if (rec_) {
    fr::Ring::end(rec_, fr::State::Failed, nullptr);
    fr::on_error(*c_.ring, error);
  }
  if (!c_.store) return;
  try {
    std::rethrow_exception(error);
  } catch (const MismatchError& e) {
    // Best effort, once per call (a rank failing on another's notice finds it there).
    try {
      std::string key = lost_key(c_.seq);
      if (!c_.store->check({key}))
        c_.store->set(key, std::string(kMismatchNotice) + "rank " + std::to_string(c_.rank) +
                               " reported: " + e.what());
    } catch (const std::exception&) {
    }
  } catch (...) {
  }
}

std::string EngineComm::signed_text() const {
  if (signed_count_ == kSignDTypeOnly) return std::string("(") + dtype_name(signed_dtype_) + ")";
  if (signed_count_ < 0) return "";
  std::string t =
      std::string("(") + dtype_name(signed_dtype_) + "[" + std::to_string(signed_count_) + "] (" +
      std::to_string(static_cast<uint64_t>(signed_count_) * dtype_size(signed_dtype_)) + " bytes)";
  if (signed_root_ >= 0) t += ", root " + std::to_string(signed_root_);
  if (signed_redop_ >= 0) t += ", reduce op " + std::to_string(signed_redop_);
  return t + ")";
}

std::string EngineComm::notice(bool store_errors) const {
  if (!c_.store) return "";
  try {
    std::string key = lost_key(c_.seq);
    // A server that answers nothing for the heartbeat timeout (its process stopped) is taken
    // as lost, as a member would be; never past the call's deadline.
    auto bound = c_.deadline.remaining();
    auto beat = config::get_duration("TPCOMM_HEARTBEAT_TIMEOUT");
    if (beat.count() > 0) bound = std::min(bound, beat);
    if (c_.store->check_within({key}, std::max(bound, std::chrono::milliseconds(1))))
      return c_.store->get_string(key);
  } catch (const TimeoutError&) {
    if (store_errors) throw;
  } catch (const StoreError&) {
    if (store_errors) throw;
  } catch (const std::exception&) {
  }
  return "";
}

std::string EngineComm::foreign_calls() const {
  const uint32_t slot = static_cast<uint32_t>(c_.seq % kSeqWindow);
  std::string out;
  std::vector<int> seen;
  for (const p2p::Engine::Unmatched& m : c_.engine->unmatched(c_.channel->id)) {
    uint32_t t = static_cast<uint32_t>(m.tag);
    uint32_t code = (t >> kSigShift) & kSigMask;
    if (((t >> 16) & 7) != slot || t >> kSigShift == sig_ >> kSigShift) continue;
    if (std::find(seen.begin(), seen.end(), m.src) != seen.end()) continue;
    seen.push_back(m.src);
    int member = -1;
    for (int i = 0; i < size(); ++i)
      if (c_.channel->ranks[i] == m.src) member = i;
    out += std::string(out.empty() ? "" : "; ") + "rank " + std::to_string(member) +
           " (global rank " + std::to_string(m.src) + ") called " + op_of_code(code) +
           (code == (sig_ >> kSigShift & kSigMask)
                ? std::string(" with other arguments (dtype, element count, root or reduce op)")
                : std::string());
  }
  if (out.empty()) return out;
  return where() + ": the ranks disagree at this sequence number: rank " + std::to_string(c_.rank) +
         " called " + c_.op + signed_text() + ", " + out +
         ". Every rank must call the same collectives in the same order";
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
    if (now - last_check > kLostCheck) {  // (also the signature check)
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
