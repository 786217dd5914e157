// The "fake" transport of the tier (c) tests (see fake_transport.h).
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>

#include "p2p/fake_transport.h"
#include "tpcomm/error.hpp"
#include "tpcomm/transport/transport.hpp"

namespace tpcomm::testing {
namespace {

using namespace transport;

class FakeTransport;

std::mutex g_mu;  // the fabric: id -> transport
std::map<uint64_t, FakeTransport*> g_fabric;
std::map<int, uint64_t> g_by_rank;  // most recent instance of each rank
uint64_t g_next_id = 1;
FakeOptions g_opt;

class FakeRegion : public MemoryRegion {
 public:
  using MemoryRegion::MemoryRegion;
  RemoteKey remote_key() const override {
    RemoteKey k;
    k.addr = reinterpret_cast<uint64_t>(addr());
    k.length = length();
    const uint8_t tag[4] = {'f', 'a', 'k', 'e'};
    k.set_blob(tag);
    return k;
  }
};

struct Delivery {
  bool is_put = false;
  bool is_error = false;
  int from = -1;
  std::vector<uint8_t> data;
  uint32_t imm = 0;
};

class FakeEndpoint;

class FakeTransport : public Transport {
 public:
  FakeTransport(const TransportContext& ctx, const FakeOptions& opt)
      : ctx_(ctx), opt_(opt), rng_(static_cast<uint32_t>(ctx.rank) * 7919 + 1) {
    efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    std::lock_guard<std::mutex> lk(g_mu);
    id_ = g_next_id++;
    g_fabric[id_] = this;
    g_by_rank[ctx.rank] = id_;
  }
  ~FakeTransport() override {
    std::lock_guard<std::mutex> lk(g_mu);
    g_fabric.erase(id_);
    ::close(efd_);
  }
  const char* name() const override { return "fake"; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.reach = Reach::Network;
    c.native_put = true;
    c.max_message = opt_.max_message;
    c.max_put = opt_.max_put;
    c.recv_slots = opt_.recv_slots;
    c.rndv_threshold = opt_.max_message;
    return c;
  }
  std::vector<uint8_t> address() const override {
    std::vector<uint8_t> a(sizeof id_);
    std::memcpy(a.data(), &id_, sizeof id_);
    return a;
  }
  Endpoint& connect(int peer, std::span<const uint8_t> addr,
                    std::chrono::steady_clock::time_point) override;
  std::unique_ptr<MemoryRegion> register_memory(void* addr, size_t len, Device d) override {
    if (opt_.refuse_register_bytes != 0 && len == opt_.refuse_register_bytes)
      throw TransportError("fake: cannot register " + std::to_string(len) + " bytes");
    return std::make_unique<FakeRegion>(addr, len, d);
  }
  int progress(EventSink& sink) override;
  int wait_fd() const override { return efd_; }
  bool arm() override {
    std::lock_guard<std::mutex> lk(mu_);
    return inbox_.empty() && done_.empty();
  }

  // Called by a sender's thread.
  void deliver(Delivery d) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!d.is_error) {
        uint64_t used = ++slots_used_[d.from];
        if (used > opt_.recv_slots) ++fake_credit_violations();
        uint64_t m = fake_max_slots_used().load();
        while (used > m && !fake_max_slots_used().compare_exchange_weak(m, used)) {
        }
      }
      inbox_.push_back(std::move(d));
    }
    uint64_t one = 1;
    ssize_t r = ::write(efd_, &one, sizeof one);
    (void)r;
  }
  void queue_done(uint64_t cookie) {
    std::lock_guard<std::mutex> lk(mu_);
    done_.push_back(cookie);
  }

  TransportContext ctx_;
  FakeOptions opt_;
  uint64_t id_ = 0;
  int efd_ = -1;
  std::mutex mu_;
  std::deque<Delivery> inbox_;
  std::deque<uint64_t> done_;
  std::map<int, uint64_t> slots_used_;
  std::map<int, std::unique_ptr<FakeEndpoint>> eps_;
  std::mt19937 rng_;
};

class FakeEndpoint : public Endpoint {
 public:
  FakeEndpoint(FakeTransport* self, int peer, uint64_t peer_id)
      : self_(self), peer_(peer), peer_id_(peer_id) {}
  int peer() const override { return peer_; }
  bool ready() const override { return true; }
  PostStatus send(std::span<const iovec> iov) override {
    if (broken_) return PostStatus::PeerFailed;
    FakeTransport* p = target();
    if (!p) return PostStatus::PeerFailed;
    Delivery d;
    d.from = self_->ctx_.rank;
    for (const iovec& v : iov)
      d.data.insert(d.data.end(), static_cast<uint8_t*>(v.iov_base),
                    static_cast<uint8_t*>(v.iov_base) + v.iov_len);
    if (d.data.size() > self_->opt_.max_message)
      throw InvalidArgument("fake: message larger than max_message");
    p->deliver(std::move(d));
    return PostStatus::Ok;
  }
  PostStatus put(const MemoryRegion& src, size_t so, const RemoteKey& dst, size_t doff, size_t len,
                 uint32_t imm, uint64_t cookie) override {
    if (broken_) return PostStatus::PeerFailed;
    FakeTransport* p = target();
    if (!p) return PostStatus::PeerFailed;
    if (so + len > src.length() || doff + len > dst.length)
      throw InvalidArgument("fake: put outside a region");
    if (len)
      std::memcpy(reinterpret_cast<uint8_t*>(dst.addr) + doff,
                  static_cast<const uint8_t*>(src.addr()) + so, len);
    Delivery d;
    d.is_put = true;
    d.from = self_->ctx_.rank;
    d.imm = imm;
    p->deliver(std::move(d));
    self_->queue_done(cookie);
    return PostStatus::Ok;
  }
  FakeTransport* target() {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_fabric.find(peer_id_);
    return it == g_fabric.end() ? nullptr : it->second;
  }

  FakeTransport* self_;
  int peer_;
  uint64_t peer_id_;
  bool broken_ = false;
};

Endpoint& FakeTransport::connect(int peer, std::span<const uint8_t> addr,
                                 std::chrono::steady_clock::time_point) {
  auto it = eps_.find(peer);
  if (it != eps_.end()) return *it->second;
  uint64_t pid = 0;
  if (addr.size() != sizeof pid) throw TransportError("fake: bad address");
  std::memcpy(&pid, addr.data(), sizeof pid);
  auto ep = std::make_unique<FakeEndpoint>(this, peer, pid);
  FakeEndpoint& ref = *ep;
  eps_[peer] = std::move(ep);
  return ref;
}

int FakeTransport::progress(EventSink& sink) {
  std::deque<Delivery> in;
  std::deque<uint64_t> done;
  {
    std::lock_guard<std::mutex> lk(mu_);
    in.swap(inbox_);
    done.swap(done_);
  }
  uint64_t v;
  ssize_t r = ::read(efd_, &v, sizeof v);
  (void)r;
  if (opt_.reorder && in.size() > 1) std::shuffle(in.begin(), in.end(), rng_);
  int n = 0;
  for (uint64_t c : done) {
    sink.on_put_done(c, true);
    ++n;
  }
  for (Delivery& d : in) {
    ++n;
    if (d.is_error) {
      auto it = eps_.find(d.from);
      if (it != eps_.end()) it->second->broken_ = true;
      sink.on_peer_error(d.from, "fake link to rank " + std::to_string(d.from) + " broken");
      continue;
    }
    if (d.is_put)
      sink.on_put_arrived(d.from, d.imm);
    else
      sink.on_message(d.from, d.data);
    std::lock_guard<std::mutex> lk(mu_);
    --slots_used_[d.from];  // the bounce buffer is reposted
  }
  return n;
}

}  // namespace

std::atomic<uint64_t>& fake_credit_violations() {
  static std::atomic<uint64_t> v{0};
  return v;
}
std::atomic<uint64_t>& fake_max_slots_used() {
  static std::atomic<uint64_t> v{0};
  return v;
}

void register_fake_transport(const FakeOptions& options) {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    g_opt = options;
  }
  register_transport("fake", [](const TransportContext& ctx) -> std::unique_ptr<Transport> {
    FakeOptions o;
    {
      std::lock_guard<std::mutex> lk(g_mu);
      o = g_opt;
    }
    return std::make_unique<FakeTransport>(ctx, o);
  });
}

void fake_break_link(int a, int b) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto ta = g_fabric.find(g_by_rank[a]), tb = g_fabric.find(g_by_rank[b]);
  if (ta == g_fabric.end() || tb == g_fabric.end()) return;
  FakeTransport* x = ta->second;
  FakeTransport* y = tb->second;
  Delivery da;
  da.is_error = true;
  da.from = b;
  Delivery db;
  db.is_error = true;
  db.from = a;
  // deliver() takes the transport's own lock only.
  x->deliver(std::move(da));
  y->deliver(std::move(db));
}

void fake_inject(int from, int to, const std::vector<uint8_t>& bytes) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto t = g_fabric.find(g_by_rank[to]);
  if (t == g_fabric.end()) return;
  Delivery d;
  d.from = from;
  d.data = bytes;
  t->second->deliver(std::move(d));
}

}  // namespace tpcomm::testing
