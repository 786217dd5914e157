// Progress: the adaptive wait (spin, then yield, then block) and the background progress
// thread that sleeps on the transports' file descriptors, so that small messages see
// busy-poll latency while oversubscribed ranks still leave each other the CPU.
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <utility>

#include "core/log.h"
#include "p2p/core_share.h"
#include "p2p/engine.h"
#include "p2p/engine_internal.h"
#include "tpcomm/error.hpp"

namespace tpcomm::p2p {
namespace {

// Progress rounds a spinning wait makes per acquisition of the engine lock.
constexpr int kRoundsPerLock = 4;

// Hint mode: a wait that has spun past its first clock reading (16 rounds), and whose last
// locked round left nothing queued in the engine, looks at its transports' lock-free
// maybe_pending() hints instead of taking the engine lock for rounds that would find
// nothing. It takes the lock when a hint turns true, and after kHintLooks looks anyway
// (heartbeats, other threads' posts, transports in no use yet). A shorter wait (the latency
// path) does not use it: counting itself in spinners_ costs two atomic read-modify-writes,
// more than the locked rounds of a wait that ends within a few (measured: +10 ns one way in
// the 8-byte ping-pong). A waiter in hint mode adds kHintUnit to spinners_ (the progress
// thread stays parked, as for any spinner), and shutdown() waits for that count to drain
// before it destroys the transports such a waiter may be calling.
constexpr int kHintLooks = 16;

// A wait past its spin looks every kExtendLook whether a transport is transferring(); while
// one is, it polls on without yielding, for at most kMaxExtend in all (then it yields and
// sleeps as usual): long enough for the oldest of a window of interleaved large transfers
// (32 x 1 MiB over tcp: ~5 ms), short of letting trickling traffic keep a waiter polling
// indefinitely.
constexpr std::chrono::microseconds kExtendLook{500};
constexpr std::chrono::milliseconds kMaxExtend{100};
// How often a waiting thread compares its CPU time with the wall clock (note_core_share).
constexpr std::chrono::milliseconds kShareLook{4};
constexpr int kHintUnit = 1 << 16;
constexpr int kMaxHints = 4;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

int Engine::progress_locked(bool everything) {
  if (!retired_.empty()) retired_.clear();
  int n = 0;
  // Transports nobody uses yet (tcp in a job that stays on one host) are polled only now and
  // then, so that they do not add a system call to every spin of the latency path.
  bool all = everything || (++progress_calls_ & 63) == 0;
  for (auto& s : slots_)
    if (s->tr && (s->used || all)) n += s->tr->progress(s->sink);
  if (!credit_due_.empty()) {
    for (Link* l : credit_due_) return_credits_locked(*l);
    credit_due_.clear();
  }
  if (!backlog_.empty()) {
    for (auto it = backlog_.begin(); it != backlog_.end();) {
      Link* l = *it;
      size_t before = l->queue.size();
      flush_queue_locked(*l);
      n += static_cast<int>(before - l->queue.size());
      it = l->queue.empty() ? backlog_.erase(it) : std::next(it);
    }
  }
  if (all) heartbeat_locked();  // a clock read every 64th call; work once per interval
  return n;
}

// ---- dead-peer detection ---------------------------------------------------------------

void Engine::heartbeat_locked() {
  using Clock = std::chrono::steady_clock;
  if (shut_down_) return;
  // The coarse clock (steady_clock's clock, a tick behind; a fraction of the fine clock's cost
  // in a VM): this runs every 64th progress round of a spinning wait, and beats are seconds
  // apart.
  auto now = Deadline::coarse_now();
  if (now >= next_watch_) {
    // Same-host peers: a pidfd poll and a /proc read each (core/liveness.h).
    next_watch_ = now + kWatchPeriod;
    // A peer found dead fails its operations one watch period later: what it sent before it
    // exited stays readable (socket buffers, rings) and progress takes it in meanwhile, so an
    // operation whose last message was already on its way (a receiver's final acknowledgement
    // of a send) completes instead of failing.
    for (auto& [peer, why] : std::exchange(dying_, {})) fail_peer_locked(peer, why);
    for (auto& [peer, why] : watch_->poll()) {
      if (why.starts_with("dead: "))
        dying_.emplace_back(peer, why);
      else
        fail_peer_locked(peer, why);
    }
  }
  if (beat_interval_.count() <= 0 || now < next_beat_) return;
  // Checked much later than due: this process itself was stopped or starved, so the peers'
  // silence says nothing about them; restart every peer's clock.
  bool we_were_away = next_beat_ != Clock::time_point{} && now - next_beat_ > 2 * beat_interval_;
  next_beat_ = now + beat_interval_;
  const size_t n = static_cast<size_t>(opt_.world_size);
  if (beats_.size() != n) beats_.resize(n);
  std::vector<uint8_t> linked(n, 0), ready(n, 0);
  for (auto& [key, l] : links_) {
    if (l->failed || l->peer < 0 || static_cast<size_t>(l->peer) >= n) continue;
    linked[static_cast<size_t>(l->peer)] = 1;
    if (!l->ep->ready()) continue;
    ready[static_cast<size_t>(l->peer)] = 1;
    if (l->flow && l->credits < 1) continue;  // the peer owes us credits: it will send
    Header h;
    h.type = MsgType::Credit;  // a credit-only message is the heartbeat (returns owed credits)
    h.src = opt_.rank;
    uint8_t hdr[kHeaderSize];
    encode_header(h, hdr);
    (void)post_msg_locked(*l, hdr, kHeaderSize, nullptr, 0, nullptr);
  }
  for (size_t p = 0; p < n; ++p) {
    int peer = static_cast<int>(p);
    uint64_t heard = 0;
    for (auto& s : slots_) {
      if (!s->tr || p >= s->heard.size() || s->heard[p] == 0) continue;
      heard += s->heard[p];
      // The peer talks to us where we have no link (it connected to us): make one, so that
      // our heartbeats reach it too.
      if (!links_.count(link_key(s->index, peer)) && !dead_peers_.count(peer) &&
          std::find(need_link_.begin(), need_link_.end(), std::make_pair(s.get(), peer)) ==
              need_link_.end())
        need_link_.emplace_back(s.get(), peer);
    }
    PeerBeat& b = beats_[p];
    if (!linked[p] || dead_peers_.count(peer)) {
      b.watched = false;
      continue;
    }
    if (!b.watched || heard != b.heard || we_were_away) {
      b.watched = true;
      b.heard = heard;
      b.since = now;
      continue;
    }
    if (beat_timeout_.count() <= 0 || now - b.since < beat_timeout_) continue;
    // A peer on this host with a working connection is judged by its process (the watch
    // above: exited, or stopped for the same timeout), not by its beats: a running process
    // whose progress thread starves on a loaded machine is alive. A connection that never
    // completed its handshake is judged here all the same.
    if (ready[p] && watch_->local(peer)) {
      b.since = now;
      continue;
    }
    auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - b.since);
    std::ostringstream os;
    os << "nothing, not even a heartbeat, arrived from rank " << peer << " for " << silent.count()
       << " ms (TPCOMM_HEARTBEAT_TIMEOUT=" << beat_timeout_.count() << "ms)";
    if (!ready[p]) os << "; its connection never completed the handshake";
    os << ": the process is stopped or hung, or the network between us is cut";
    fail_peer_locked(peer, os.str(), /*silent=*/true);
  }
}

void Engine::make_wanted_links() {
  std::vector<std::pair<Slot*, int>> want;
  {
    auto lk = lock_engine();
    want.swap(need_link_);
  }
  for (auto [slot, peer] : want) {
    try {
      // Its address: a store lookup, without the engine lock (it was published before the
      // peer could send us anything; check first so that nothing here blocks).
      std::string key = "link/" + slot->name + "/" + std::to_string(peer);
      if (!opt_.store->check({key})) continue;
      peer_address(slot->name, peer);
      auto lk = lock_engine();
      if (shut_down_ || dead_peers_.count(peer)) continue;
      link_locked(*slot, peer);
    } catch (const std::exception& e) {
      TPLOG(INFO, P2P) << "rank " << opt_.rank << ": no " << slot->name << " link back to rank "
                       << peer << " for heartbeats: " << e.what();
    }
  }
}

bool Engine::test(Op& op) {
  if (op.done.load(std::memory_order_acquire)) return true;
  // A thread polling test() (Work::is_completed in a loop) drives the transports as a
  // spinning wait does: the epoch keeps the progress thread parked (kLinger) rather than
  // asleep on the transports' fds, where each arrival would wake it to contend for the lock
  // and the core (polling is_completed over ucx/tcp at W=32: 72-77% of wait's bandwidth).
  bump_spin_epoch();
  if (mu_.try_lock()) {
    progress_locked();
    mu_.unlock();
  }
  return op.done.load(std::memory_order_acquire);
}

void Engine::wait(Op& op, Deadline deadline) {
  wait_impl(op, deadline.when(), std::chrono::milliseconds(-1));
}

void Engine::note_core_share(std::chrono::steady_clock::time_point now) {
  // Per thread, at clock readings only (nothing on the latency path), one system call per
  // kShareLook of waiting (CLOCK_THREAD_CPUTIME_ID has no vDSO path). A thread that ran all
  // along (spinning, or computing between waits) but got less than 90% of the wall clock
  // shared its core with someone runnable. One that blocked in between reads the same, which
  // keeps the progress thread's frequent looks: the behaviour for a contended core.
  thread_local CoreShareMeter meter(std::chrono::nanoseconds(kShareLook).count());
  int64_t wall =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  if (!meter.due(wall)) return;
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return;
  auto contended =
      meter.close_window(wall, static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec);
  if (contended) core_contended_.store(*contended, std::memory_order_relaxed);
}

void Engine::wait(Op& op, std::chrono::milliseconds timeout) {
  // A send that went out eagerly is done before anyone waits: no clock is read at all.
  if (op.done.load(std::memory_order_acquire)) {
    if (op.error) std::rethrow_exception(op.error);
    return;
  }
  if (timeout.count() < 0) timeout = std::chrono::hours(24 * 366);  // "never", as Deadline
  wait_impl(op, Deadline::Clock::time_point{}, timeout);
}

void Engine::wait_impl(Op& op, std::chrono::steady_clock::time_point until,
                       std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  // The clock is read only every 16th round, so a wait that ends within a few rounds (the
  // latency path) reads none; a relative timeout starts at the first reading.
  Clock::time_point start{}, spin_end{}, yield_end{};
  Clock::time_point extend_end{};  // polling on while transferring ends here (kMaxExtend)
  Clock::time_point next_look{};   // the next look at transferring()
  bool hot = false;                // a transport was transferring at the last look
  bool clocked = false;
  if (!op.done.load(std::memory_order_acquire)) {
    // The progress thread stays parked while a thread spins, and for about kLinger after
    // (spin_epoch_ changed), so that back-to-back waits (a ping-pong) never hand the
    // transports to it and back. A thread about to sleep hands them over at once. A wait
    // counts itself in spinners_ only at its first clock reading (after 16 rounds, or 1 with
    // the short oversubscribed spin, or at once over transports polled by system calls:
    // clock_mask below): one that ends sooner (the latency path) costs no atomic
    // read-modify-write; the epoch it bumps when it ends keeps a parked progress thread
    // lingering.
    bool spinning = true;
    bool counted = false;
    // Hint mode (kHintLooks): the used transports as of the last locked round, whether that
    // round allowed hint mode, and whether this wait counts kHintUnit in spinners_.
    transport::Transport* hints[kMaxHints];
    int nhints = 0;
    bool hint_ok = false;
    bool hinting = false;
    auto stop_spinning = [&](bool handover) {
      if (!spinning) return;
      spinning = false;
      bump_spin_epoch();
      int mine = (counted ? 1 : 0) + (hinting ? kHintUnit : 0);
      hinting = false;
      if (mine != 0 && spinners_.fetch_sub(mine) == mine && handover) {
        std::lock_guard<std::mutex> pl(park_mu_);
        park_cv_.notify_one();
      }
    };
    // Under the engine lock: may the wait use hint mode until its next locked round? Only
    // while nothing engine-level is queued (the backlog) and the used transports are few;
    // fills hints.
    auto hint_mode_locked = [&]() {
      if (!backlog_.empty()) return false;
      nhints = 0;
      for (auto& sl : slots_) {
        if (!sl->tr || !sl->used) continue;
        if (nhints == kMaxHints) return false;
        hints[nhints++] = sl->tr.get();
      }
      return nhints > 0;
    };
    // The clock is read every 16 rounds (a round that finds nothing is cheap over shm), or
    // every round when waits spin at most a few microseconds (oversubscribed: a tcp round is a
    // system call, and 16 of them before the first reading kept the core from the peer that
    // shares it for tens of microseconds per wait).
    // Where every transport in use polls by a system call (Capabilities::progress_is_syscall:
    // UCX over tcp): no pause after a round that found nothing (it only lengthens each of the
    // many rounds of a large tcp transfer), the clock every round, and the wait counted in
    // spinners_ from its start. Such a round takes microseconds, up to a millisecond when it
    // pushes a rendezvous' data, and a wait that counted itself only after 16 of them would let
    // the progress thread take the transports over from under it.
    const bool syscall_polls = syscall_polls_.load(std::memory_order_relaxed);
    const unsigned clock_mask = spin_us_ <= 2 || syscall_polls ? 0u : 15u;
    // The first clock reading: the wait counts itself in spinners_ and its phases start.
    auto first_reading = [&](Clock::time_point now) {
      clocked = true;
      spinners_.fetch_add(1);
      counted = true;
      start = now;
      spin_end = now + std::chrono::microseconds(spin_us_);
      yield_end = spin_end + std::chrono::microseconds(yield_us_);
      if (timeout.count() >= 0)
        until = timeout > std::chrono::hours(24 * 365) ? Clock::time_point::max() : now + timeout;
    };
    try {
      if (syscall_polls) first_reading(Clock::now());
      unsigned spins = 0;
      while (!op.done.load(std::memory_order_acquire)) {
        if (hint_ok && counted && !syscall_polls) {
          if (!hinting) {
            spinners_.fetch_add(kHintUnit);
            hinting = true;
          }
          if (stop_.load()) {
            // shutdown() waits for hint-mode waiters to leave before closing the transports.
            spinners_.fetch_sub(kHintUnit);
            hinting = false;
            hint_ok = false;
          } else {
            // Until a hint turns true, or kHintLooks looks passed: then a locked round.
            bool any = false;
            for (int k = 0; k < kHintLooks && !any; ++k) {
              for (int i = 0; i < nhints && !any; ++i) any = hints[i]->maybe_pending();
              if (op.done.load(std::memory_order_acquire)) break;
              if (!any) cpu_relax();
            }
            if (op.done.load(std::memory_order_acquire)) break;
          }
        }
        if (mu_.try_lock()) {
          // A few rounds per lock: the lock's two atomic operations cost as much as a round
          // that finds nothing, and a shorter round sees an arrival sooner. A round that
          // found nothing pauses once: re-reading the line where the next message will land
          // back to back slows the sender's write into it (its cache line must leave this
          // core first), more than the pause delays noticing it (measured: 8-byte one-way
          // 0.239-0.247 us against 0.253-0.258 without, best of 12 runs each, same run).
          for (int k = 0; k < kRoundsPerLock; ++k) {
            int found = progress_locked();
            if (op.done.load(std::memory_order_acquire)) break;
            if (found == 0 && !syscall_polls) cpu_relax();
          }
          if (!op.done.load(std::memory_order_acquire)) hint_ok = hint_mode_locked();
          mu_.unlock();
          if (op.done.load(std::memory_order_acquire)) break;
        }
        if ((++spins & clock_mask) != 0) continue;
        auto now = Clock::now();
        if (!clocked) first_reading(now);
        if (now >= until) break;
        note_core_share(now);
        if (now >= spin_end && spin_us_ > 2 && yield_us_ > 0 && now >= next_look) {
          // Past the spin: is a transport moving a transfer's bytes right now
          // (Transport::transferring)? Looked at every kExtendLook, for kMaxExtend at most.
          // While it is, the wait polls on without sched_yield: a yield hands the core to any
          // other runnable process for its whole slice (under one compile job, 1 MiB over
          // UCX's tcp fell to a third of tag_bw's), and sleeping hands the stream to the
          // progress thread. Not with the oversubscribed short spin (ranks share cores: the
          // peer needs ours), nor where TPCOMM_WAIT_YIELD_US=0 asks waits to sleep at once.
          next_look = now + kExtendLook;
          hot = (extend_end == Clock::time_point{} || now < extend_end) && transferring_now();
          if (hot && extend_end == Clock::time_point{}) extend_end = now + kMaxExtend;
        }
        if (now < spin_end || hot) {
          if (!syscall_polls) cpu_relax();
        } else if (now < yield_end) {
          sched_yield();
        } else {
          // Block: the progress thread drives the transports and wakes us on completion.
          // Wake it too: our progress calls may have consumed the wake-up it armed for.
          sleepers_.fetch_add(1);
          hint_ok = false;
          stop_spinning(true);
          wake_progress_thread();
          auto lk = lock_engine();
          while (!op.done.load(std::memory_order_acquire) && Clock::now() < until && !stop_) {
            auto wake = std::min(until, Clock::now() + std::chrono::milliseconds(100));
            done_cv_.wait_until(lk, wake);
          }
          sleepers_.fetch_sub(1);
          break;
        }
      }
    } catch (...) {
      stop_spinning(true);
      throw;
    }
    stop_spinning(false);
  }
  if (!op.done.load(std::memory_order_acquire)) {
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
        clocked ? Clock::now() - start : std::chrono::nanoseconds(0));
    throw TimeoutError(op.describe() + " did not complete within " +
                       std::to_string(waited.count()) + " ms on rank " + std::to_string(opt_.rank) +
                       ": " + waiting_for(op));
  }
  if (op.error) std::rethrow_exception(op.error);
}

std::string Engine::waiting_for(const Op& op) {
  auto lk = lock_engine();
  std::ostringstream os;
  std::string peer =
      op.peer == kAnySource ? std::string("any rank") : "rank " + std::to_string(op.peer);
  switch (op.stage) {
    case Op::Stage::Queued:
      os << "waiting for flow-control credits or transport resources on the link to " << peer
         << " (is " << peer << " progressing?)";
      break;
    case Op::Stage::Posted:
      if (op.kind == Op::Kind::Recv) {
        os << "no matching message from " << peer << " has arrived";
        if (op.peer != kAnySource)
          os << " (" << matcher_.expected(ChannelKey{op.group, op.peer, op.tag})
             << " earlier messages on this group and tag were received)";
        os << "; " << matcher_.unexpected() << " unmatched messages are queued here";
      } else {
        os << peer << " has not posted the matching receive (rendezvous request sent, no "
           << "answer yet)";
      }
      break;
    case Op::Stage::Transfer:
      os << (op.kind == Op::Kind::Recv ? "waiting for the data from " : "sending the data to ")
         << (op.link ? "rank " + std::to_string(op.link->peer) : peer) << " (" << op.chunks_left
         << " chunks outstanding)";
      break;
    case Op::Stage::Done:
      os << "completed";
      break;
  }
  auto dead = op.peer == kAnySource ? dead_peers_.end() : dead_peers_.find(op.peer);
  if (dead != dead_peers_.end()) os << "; that rank is " << dead->second;
  return os.str();
}

bool Engine::transferring_now() {
  // Only when the lock is free: a waiter never queues behind the progress thread for this.
  if (!mu_.try_lock()) return false;
  bool busy = false;
  // Links that only the progress thread makes (a peer's heartbeat back-link) need it awake.
  if (need_link_.empty())
    for (auto& s : slots_)
      if (s->tr && s->used && s->tr->transferring()) busy = true;
  mu_.unlock();
  return busy;
}

void Engine::wake_progress_thread() {
  if (wake_fd_ < 0) return;
  uint64_t one = 1;
  ssize_t r = ::write(wake_fd_, &one, sizeof one);
  (void)r;
}

void Engine::progress_thread_main() {
  pthread_setname_np(pthread_self(), "tpcomm-progress");  // for top -H, perf, gdb
  epoll_event evs[16];
  uint64_t parked_epoch = 0;
  while (!stop_.load()) {
    // Linger while a user thread spins, or spun since the last look (its epoch moved) and
    // none sleeps: it progresses the transports itself and will likely wait again soon.
    // Each look is a timer wake-up on the spinner's core (~17 us of this thread's time in a
    // VM, and a context switch of the spinner's). A fixed longer period measures up to 7%
    // faster on a calm machine and 5-50% slower under other processes' load, where these
    // frequent wake-ups win the core back for the rank. So the period follows the waiters'
    // own reading of their core (note_core_share): kLinger while they lose CPU time to
    // someone, kLingerCalm while they get all of it.
    uint64_t epoch = spin_epoch_.load(std::memory_order_relaxed);
    if (spinners_.load() > 0 || (sleepers_.load() == 0 && epoch != parked_epoch)) {
      parked_epoch = epoch;
      std::unique_lock<std::mutex> pl(park_mu_);
      auto linger = core_contended_.load(std::memory_order_relaxed) ? kLinger : kLingerCalm;
      park_cv_.wait_for(pl, linger, [&] {
        return stop_.load() || (spinners_.load() == 0 && sleepers_.load() > 0);
      });
      continue;
    }
    bool sleep = true;
    int timeout_ms = 200;  // a safety net; wake-ups come through the fds
    bool want_links = false;
    {
      auto lk = lock_engine();
      if (progress_locked(true) > 0) {
        sleep = false;
      } else {
        for (auto& s : slots_)
          if (s->tr && !s->tr->arm()) sleep = false;
      }
      if (any_without_fd_ || !backlog_.empty()) timeout_ms = 1;
      want_links = !need_link_.empty();
      // Under the lock, so that a post either comes before arm() above (which finishes its
      // deferred work) or sees the flag and wakes us (post_msg_locked).
      progress_sleeping_.store(sleep, std::memory_order_relaxed);
    }
    if (want_links) make_wanted_links();
    watch_->resolve(*opt_.store);  // peers not known yet (a store look-up once a second)
    if (!sleep) continue;
    // The transports' fds join the set for this sleep only. An fd added while ready is
    // reported at once (epoll checks it on insertion), so nothing armed above is missed.
    for (int fd : sleep_fds_)
      if (!epoll_watch(epoll_fd_, fd)) timeout_ms = 1;
    int n = epoll_wait(epoll_fd_, evs, 16, timeout_ms);
    for (int fd : sleep_fds_) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    progress_sleeping_.store(false, std::memory_order_relaxed);
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.fd == wake_fd_) {
        uint64_t v;
        ssize_t r = ::read(wake_fd_, &v, sizeof v);
        (void)r;
      }
    }
  }
}

void Engine::shutdown() {
  {
    auto lk = lock_engine();
    if (shut_down_) return;
    shut_down_ = true;
  }
  stop_.store(true);
  wake_progress_thread();
  {
    std::lock_guard<std::mutex> pl(park_mu_);
    park_cv_.notify_all();
  }
  if (progress_thread_.joinable()) progress_thread_.join();
  // Waits in hint mode call the transports without the lock: each leaves that mode at its
  // next look, having seen stop_, before the transports are closed below.
  while (spinners_.load() >= kHintUnit) sched_yield();
  auto lk = lock_engine();
  // Give queued messages (an eager send reported complete is already on the wire or in the
  // transport) a bounded chance to leave.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!backlog_.empty() && std::chrono::steady_clock::now() < until) progress_locked();
  std::vector<std::shared_ptr<Op>> pending;
  for (auto& op : ops_.snapshot()) pending.push_back(op);
  for (auto& [key, l] : links_)
    for (Pending& p : l->queue)
      if (p.op) pending.push_back(p.op);
  for (auto& op : pending)
    fail_locked(op, std::make_exception_ptr(AbortedError(
                        op->describe() + " was aborted: the process group was destroyed")));
  for (auto& [id, in] : incoming_) delete in;
  incoming_.clear();
  retired_.clear();
  backlog_.clear();
  credit_due_.clear();
  chosen_.clear();
  chosen_fast_.clear();
  links_.clear();
  slots_.clear();  // transports flush and close
  done_cv_.notify_all();
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  epoll_fd_ = wake_fd_ = -1;
}

}  // namespace tpcomm::p2p
