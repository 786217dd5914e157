// LocalWorld: mailboxes under one lock. Matching copies the payload while holding the lock,
// so a request cancelled by its destructor (which takes the same lock) can never have its
// buffer touched afterwards.
#include "collectives/local_comm.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "tpcomm/error.hpp"

namespace tpcomm::coll {

namespace {

struct LocalOp;
using Key = std::tuple<int, int, int>;  // (source, destination, tag)

std::string describe(const LocalOp& op);

}  // namespace

class LocalWorld::Impl {
 public:
  Impl(int size, const Options& o) : size_(size), opt_(o), cv_(size) {}

  int size_;
  Options opt_;
  mutable std::mutex mu_;
  std::vector<std::condition_variable> cv_;  // one per rank: its operations completed
  std::map<Key, std::deque<LocalOp*>> sends_, recvs_;
  bool aborted_ = false;
  std::string reason_;
  std::vector<std::unique_ptr<CollComm>> comms_;

  Request post(int owner, bool is_send, const void* sbuf, void* rbuf, size_t bytes, int peer,
               int tag);
  void cancel(LocalOp* op);
  void fail_locked(const std::string& reason);
  AbortedError aborted_error(int rank) const {
    return AbortedError("local group rank " + std::to_string(rank) +
                        ": operation aborted because another rank failed: " + reason_);
  }
};

namespace {

struct LocalOp : RequestState {
  LocalWorld::Impl* world = nullptr;
  bool is_send = false;
  int owner = 0, peer = 0, tag = 0;
  const void* sbuf = nullptr;
  void* rbuf = nullptr;
  size_t bytes = 0;
  bool queued = false;
  bool done = false;
  std::exception_ptr error;
  ~LocalOp() override { world->cancel(this); }
};

std::string describe(const LocalOp& op) {
  std::ostringstream os;
  if (op.is_send) {
    os << "a send of " << op.bytes << " bytes to rank " << op.peer;
  } else {
    os << "a receive of " << op.bytes << " bytes from rank " << op.peer;
  }
  os << " (tag " << op.tag << ")";
  return os.str();
}

// One rank's CollComm.
class LocalComm : public CollComm {
 public:
  LocalComm(LocalWorld::Impl* w, int rank) : w_(w), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return w_->size_; }
  Request isend(const void* buf, size_t bytes, int peer, int tag) override {
    return w_->post(rank_, true, buf, nullptr, bytes, peer, tag);
  }
  Request irecv(void* buf, size_t bytes, int peer, int tag) override {
    return w_->post(rank_, false, nullptr, buf, bytes, peer, tag);
  }
  void wait(Request& req) override {
    Request* one[] = {&req};
    wait_any(one);
  }
  bool test(Request& req) override {
    if (req.empty()) return true;
    auto* op = static_cast<LocalOp*>(req.state());
    std::exception_ptr err;
    {
      std::lock_guard<std::mutex> lk(w_->mu_);
      if (!op->done) {
        if (w_->aborted_) throw w_->aborted_error(rank_);
        return false;
      }
      err = op->error;
    }
    req.reset();
    if (err) std::rethrow_exception(err);
    return true;
  }
  int wait_any(std::span<Request* const> reqs) override;
  Deadline deadline() const override { return Deadline::after(w_->opt_.timeout); }
  TransportHints hints() const override { return w_->opt_.hints; }

 private:
  LocalWorld::Impl* w_;
  int rank_;
};

int LocalComm::wait_any(std::span<Request* const> reqs) {
  bool any = false;
  for (Request* r : reqs) any = any || (r != nullptr && !r->empty());
  if (!any) return -1;
  Deadline dl = deadline();
  int found = -1;
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> lk(w_->mu_);
    for (;;) {
      for (size_t i = 0; i < reqs.size() && found < 0; ++i) {
        if (reqs[i] == nullptr || reqs[i]->empty()) continue;
        if (static_cast<LocalOp*>(reqs[i]->state())->done) found = static_cast<int>(i);
      }
      if (found >= 0) break;
      if (w_->aborted_) throw w_->aborted_error(rank_);
      if (w_->cv_[rank_].wait_until(lk, dl.when()) == std::cv_status::timeout && dl.expired()) {
        std::ostringstream os;
        os << "local group rank " << rank_ << ": timed out after " << w_->opt_.timeout.count()
           << " ms waiting for";
        int listed = 0;
        for (Request* r : reqs) {
          if (r == nullptr || r->empty()) continue;
          os << (listed++ ? ", " : " ") << describe(*static_cast<LocalOp*>(r->state()));
          if (listed == 4) break;
        }
        os << "; the peer has not posted the matching operation (a hang or a mismatch)";
        w_->fail_locked(os.str());
        throw TimeoutError(os.str());
      }
    }
    err = static_cast<LocalOp*>(reqs[found]->state())->error;
  }
  reqs[found]->reset();
  if (err) std::rethrow_exception(err);
  return found;
}

}  // namespace

Request LocalWorld::Impl::post(int owner, bool is_send, const void* sbuf, void* rbuf, size_t bytes,
                               int peer, int tag) {
  if (peer < 0 || peer >= size_) {
    throw InvalidArgument("local group rank " + std::to_string(owner) + ": peer " +
                          std::to_string(peer) + " out of range [0, " + std::to_string(size_) +
                          ")");
  }
  auto op = std::make_unique<LocalOp>();
  op->world = this;
  op->is_send = is_send;
  op->owner = owner;
  op->peer = peer;
  op->tag = tag;
  op->sbuf = sbuf;
  op->rbuf = rbuf;
  op->bytes = bytes;
  std::lock_guard<std::mutex> lk(mu_);
  if (aborted_) throw aborted_error(owner);
  Key key = is_send ? Key{owner, peer, tag} : Key{peer, owner, tag};
  auto& other = is_send ? recvs_ : sends_;
  auto it = other.find(key);
  if (it == other.end() || it->second.empty()) {
    op->queued = true;
    (is_send ? sends_ : recvs_)[key].push_back(op.get());
    return Request(std::move(op));
  }
  LocalOp* match = it->second.front();
  it->second.pop_front();
  if (it->second.empty()) other.erase(it);
  match->queued = false;
  LocalOp* s = is_send ? op.get() : match;
  LocalOp* r = is_send ? match : op.get();
  if (s->bytes != r->bytes) {
    std::ostringstream os;
    os << "rank " << s->owner << " sent " << s->bytes << " bytes to rank " << r->owner
       << " with tag " << s->tag << ", but rank " << r->owner << " posted a receive of " << r->bytes
       << " bytes: the ranks disagree on the sizes of this collective";
    s->error = r->error = std::make_exception_ptr(MismatchError(os.str()));
  } else if (s->bytes > 0) {
    std::memcpy(r->rbuf, s->sbuf, s->bytes);
  }
  s->done = r->done = true;
  cv_[match->owner].notify_all();
  return Request(std::move(op));
}

void LocalWorld::Impl::cancel(LocalOp* op) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!op->queued) return;
  Key key = op->is_send ? Key{op->owner, op->peer, op->tag} : Key{op->peer, op->owner, op->tag};
  auto& q = op->is_send ? sends_ : recvs_;
  auto it = q.find(key);
  if (it == q.end()) return;
  for (auto d = it->second.begin(); d != it->second.end(); ++d) {
    if (*d == op) {
      it->second.erase(d);
      break;
    }
  }
  if (it->second.empty()) q.erase(it);
  op->queued = false;
}

void LocalWorld::Impl::fail_locked(const std::string& reason) {
  if (!aborted_) {
    aborted_ = true;
    reason_ = reason;
  }
  for (auto& cv : cv_) cv.notify_all();
}

LocalWorld::LocalWorld(int size) : LocalWorld(size, Options{}) {}

LocalWorld::LocalWorld(int size, const Options& options) {
  if (size < 1)
    throw InvalidArgument("LocalWorld: size must be at least 1, got " + std::to_string(size));
  impl_ = std::make_unique<Impl>(size, options);
  for (int r = 0; r < size; ++r)
    impl_->comms_.push_back(std::make_unique<LocalComm>(impl_.get(), r));
}

LocalWorld::~LocalWorld() = default;

int LocalWorld::size() const { return impl_->size_; }

CollComm& LocalWorld::comm(int rank) { return *impl_->comms_.at(static_cast<size_t>(rank)); }

void LocalWorld::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lk(impl_->mu_);
  impl_->fail_locked(reason);
}

void LocalWorld::reset() {
  std::lock_guard<std::mutex> lk(impl_->mu_);
  impl_->aborted_ = false;
  impl_->reason_.clear();
  for (auto* q : {&impl_->sends_, &impl_->recvs_}) {
    for (auto& [k, d] : *q) {
      for (LocalOp* op : d) op->queued = false;
    }
    q->clear();
  }
}

size_t LocalWorld::unmatched() const {
  std::lock_guard<std::mutex> lk(impl_->mu_);
  size_t n = 0;
  for (auto& [k, d] : impl_->sends_) n += d.size();
  for (auto& [k, d] : impl_->recvs_) n += d.size();
  return n;
}

void LocalWorld::run(const std::function<void(CollComm&)>& fn) {
  std::mutex err_mu;
  std::exception_ptr first, first_aborted;
  auto body = [&](int r) {
    try {
      fn(comm(r));
    } catch (const AbortedError&) {
      std::lock_guard<std::mutex> lk(err_mu);
      if (!first_aborted) first_aborted = std::current_exception();
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lk(err_mu);
        if (!first) first = std::current_exception();
      }
      abort("rank " + std::to_string(r) + " failed: " + e.what());
    } catch (...) {
      {
        std::lock_guard<std::mutex> lk(err_mu);
        if (!first) first = std::current_exception();
      }
      abort("rank " + std::to_string(r) + " failed with an unknown exception");
    }
  };
  if (size() == 1) {
    body(0);
  } else {
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(size()));
    for (int r = 0; r < size(); ++r) threads.emplace_back(body, r);
    for (auto& t : threads) t.join();
  }
  reset();
  if (first) std::rethrow_exception(first);
  if (first_aborted) std::rethrow_exception(first_aborted);
}

}  // namespace tpcomm::coll
