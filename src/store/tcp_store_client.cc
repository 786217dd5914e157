// TCPStore client: requests over one persistent connection, replies matched by request id.
#include "store/tcp_store_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <thread>

#include "core/auth.h"
#include "core/config.h"
#include "core/log.h"
#include "store/store_util.h"
#include "store/tcp_store_server.h"
#include "tpcomm/error.hpp"

namespace tpcomm {

using store_wire::ErrorCode;
using store_wire::Header;
using store_wire::HeaderStatus;
using store_wire::Op;
using store_wire::Reply;
using store_wire::Writer;

namespace {

// Busy-polling pays off only while a core is free for the spinning thread. A job has one
// client per process; a process with more clients than half the cores (clients as threads,
// in tests and benchmarks) makes them all sleep in the kernel instead, and at most that many
// threads spin at once.
std::atomic<int> g_clients{0};
std::atomic<int> g_spinners{0};
int max_spinners() {
  static const int n = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2);
  return n;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

std::string quoted(const std::string& key) {
  return "'" + (key.size() > 64 ? key.substr(0, 64) + "..." : key) + "'";
}

std::string keys_text(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size() && i < 4; ++i) s += (i ? ", " : "") + quoted(keys[i]);
  if (keys.size() > 4) s += ", ...";
  return s;
}

constexpr std::chrono::milliseconds kCancelGrace{1000};
constexpr size_t kMaxAbandoned = 64;

}  // namespace

TCPStoreClient::TCPStoreClient(const std::string& host, uint16_t port, const std::string& job_id,
                               std::chrono::milliseconds timeout, bool master_self)
    : addr_(net::join_host_port(host, port)),
      peer_name_("TCPStore " + addr_),
      job_id_(resolve_store_job_id(job_id)) {
  spin_ = store_spin_from_registry();
  secret_ = auth::job_secret();
  reply_limits_.max_key = 1u << 20;
  reply_limits_.max_value = uint64_t{1} << 40;
  Deadline deadline = Deadline::after(timeout);
  fd_ = net::connect_to(host, port, deadline);
  handshake(job_id_, master_self, deadline, timeout);
  g_clients.fetch_add(1, std::memory_order_relaxed);
}

TCPStoreClient::~TCPStoreClient() {
  g_clients.fetch_sub(1, std::memory_order_relaxed);
  if (!fd_.valid()) return;
  // Read what the server may still have sent (late replies): closing with unread data
  // would reset the connection instead of closing it in order.
  char sink[4096];
  while (::recv(fd_.get(), sink, sizeof(sink), MSG_DONTWAIT) > 0) {
  }
  ::shutdown(fd_.get(), SHUT_WR);
}

uint32_t TCPStoreClient::new_id() {
  uint32_t id = next_id_++;
  if (next_id_ == 0) next_id_ = 1;
  return id;
}

void TCPStoreClient::hello_round(const std::string& job_id, uint32_t flags, Deadline deadline,
                                 std::chrono::milliseconds timeout) {
  std::string me = net::hostname() + ":" + std::to_string(::getpid());
  auth::Nonce mine{}, theirs{};
  bool challenged = false;
again:
  uint32_t id = new_id();
  wbuf_.clear();
  Writer w(&wbuf_);
  w.begin(Op::kHello, id);
  w.str(job_id);
  w.str(me);
  w.u32(flags);
  w.end();
  send_request(deadline, What{"the handshake"});
  uint32_t got = read_reply(id, 0, deadline, What{"the handshake"});
  if (got == 0) {
    broken_ = "TCPStore at " + addr_ + ": no answer to the handshake within " +
              std::to_string(timeout.count()) +
              " ms; is a tpcomm store listening there (not another program), and is it "
              "overloaded?";
    fd_.reset();
    throw TimeoutError(broken_);
  }
  std::string msg(reply_.message);
  if (reply_.op == static_cast<uint8_t>(Op::kError) &&
      reply_.code == store_wire::ErrorCode::kAuthRequired && !secret_.empty() && !challenged) {
    // Shared secret: answer the challenge with a nonce of ours and the proof, in a new hello.
    size_t at = msg.rfind("[challenge ");
    if (at == std::string::npos || !auth::unhex(std::string_view(msg).substr(at + 11, 32), theirs))
      fail("TCPStore at " + addr_ + ": malformed shared-secret challenge");
    mine = auth::make_nonce();
    me += " [response " + auth::hex(mine) +
          auth::hex(auth::proof(secret_, "store-client", job_id, theirs, mine)) + "]";
    challenged = true;
    goto again;
  }
  if (reply_.op == static_cast<uint8_t>(Op::kError)) {
    broken_ = "TCPStore at " + addr_ + " refused this client: " + msg;
    if (reply_.code == store_wire::ErrorCode::kAuthRequired)
      broken_ += "; this client has no TPCOMM_AUTH_SECRET";
    fd_.reset();
    throw StoreError(broken_);
  }
  if (reply_.op != static_cast<uint8_t>(Op::kHelloOk)) {
    fail("TCPStore at " + addr_ + ": unexpected " + std::to_string(reply_.op) +
         " reply to the handshake; is it a tpcomm store of the same version?");
  }
  if (!secret_.empty()) {
    // The server proves the secret too, on our nonce.
    std::string server(reply_.server);
    size_t at = server.rfind(" [proof ");
    crypto::Digest got{};
    bool ok = challenged && at != std::string::npos && server.size() == at + 8 + 64 + 1 &&
              auth::unhex(std::string_view(server).substr(at + 8, 64), got) &&
              crypto::digest_equal(got, auth::proof(secret_, "store-server", job_id, mine, theirs));
    if (!ok) {
      broken_ = "TCPStore at " + addr_ + " refused by this client: " +
                (challenged ? std::string("the server did not prove the job's shared secret (its "
                                          "TPCOMM_AUTH_SECRET differs)")
                            : std::string("the server accepted it without asking for the shared "
                                          "secret (TPCOMM_AUTH_SECRET is set here, not on the "
                                          "server)"));
      fd_.reset();
      throw StoreError(broken_);
    }
  }
}

net::Fd TCPStoreClient::connect_local(std::string_view name) {
  sockaddr_un sa{};
  if (name.empty() || name.size() + 1 > sizeof(sa.sun_path)) return net::Fd();
  net::Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return net::Fd();
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path + 1, name.data(), name.size());
  auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  // Connecting to a listening Unix socket completes at once (or fails: ECONNREFUSED,
  // ENOENT on another host or network namespace, EAGAIN when its backlog is full).
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), len) != 0) return net::Fd();
  return fd;
}

void TCPStoreClient::handshake(const std::string& job_id, bool master_self, Deadline deadline,
                               std::chrono::milliseconds timeout) {
  const uint32_t self = master_self ? store_wire::kHelloSelf : 0;
  bool hello_done = false;
  if (config::get_bool("TPCOMM_STORE_LOCAL_SOCKET")) {
    // Ask for the server's local socket first; when it is reachable (same host and network
    // namespace), move there and say hello again. Otherwise say hello here.
    hello_round(job_id, self | store_wire::kHelloAskLocal, deadline, timeout);
    std::string name(reply_.local);
    if (net::Fd local = connect_local(name); local.valid()) {
      net::Fd tcp = std::move(fd_);
      fd_ = std::move(local);
      rlen_ = rpos_ = 0;
      rcvtimeo_us_ = 0;
      hello_round(job_id, self, deadline, timeout);
      local_ = true;
      hello_done = true;
      ::shutdown(tcp.get(), SHUT_WR);  // closed in order; the server drops it
    }
  }
  if (!hello_done) hello_round(job_id, self, deadline, timeout);
  limits_.max_key = reply_.max_key;
  limits_.max_value = reply_.max_value;
  TPLOG(INFO, STORE) << "TCPStore client connected to " << addr_ << " (server " << reply_.server
                     << ", job '" << job_id << "'" << (local_ ? ", over its local socket" : "")
                     << ")";
}

std::string TCPStoreClient::What::str() const {
  if (key) return std::string(op) + "(" + quoted(*key) + ")";
  if (keys) return std::string(op) + "(" + keys_text(*keys) + ")";
  return op;
}

void TCPStoreClient::throw_if_broken() const {
  if (!broken_.empty()) throw StoreError(broken_);
}

void TCPStoreClient::fail(const std::string& msg) {
  broken_ = msg;
  fd_.reset();
  throw StoreError(msg);
}

void TCPStoreClient::check_key(const char* op, const std::string& key) const {
  if (key.size() > limits_.max_key) {
    throw StoreError(std::string(op) + "(" + quoted(key) + "): key of " +
                     std::to_string(key.size()) + " bytes exceeds the limit TPCOMM_STORE_MAX_KEY=" +
                     std::to_string(limits_.max_key) + " bytes of the TCPStore at " + addr_ +
                     "; use shorter keys or raise TPCOMM_STORE_MAX_KEY on the server");
  }
}

void TCPStoreClient::check_value(const char* op, const std::string& key, size_t size) const {
  if (size > limits_.max_value) {
    throw StoreError(std::string(op) + "(" + quoted(key) + "): value of " + std::to_string(size) +
                     " bytes exceeds the limit TPCOMM_STORE_MAX_VALUE=" +
                     std::to_string(limits_.max_value) + " bytes of the TCPStore at " + addr_ +
                     "; store less, or raise TPCOMM_STORE_MAX_VALUE on the server");
  }
}

void TCPStoreClient::check_frame(const char* op) const {
  size_t payload = wbuf_.size() - store_wire::kHeaderSize;
  if (payload > limits_.max_payload()) {
    throw StoreError(std::string(op) + ": request of " + std::to_string(payload) +
                     " bytes exceeds the limit of the TCPStore at " + addr_ +
                     " (TPCOMM_STORE_MAX_VALUE=" + std::to_string(limits_.max_value) +
                     " bytes per request); split it, or raise TPCOMM_STORE_MAX_VALUE on the "
                     "server");
  }
}

void TCPStoreClient::send_request(Deadline deadline, const What& what) {
  try {
    net::write_all(fd_.get(), wbuf_.data(), wbuf_.size(), deadline, peer_name_);
  } catch (const TimeoutError& e) {
    // Part of a frame may be out: the stream can no longer be trusted.
    broken_ = std::string(e.what()) + " during " + what.str();
    fd_.reset();
    throw;
  } catch (const Error& e) {
    fail("lost the connection to the TCPStore server at " + addr_ + " during " + what.str() + " (" +
         e.what() + "); has the server (master rank or tpstore) exited?");
  }
}

ssize_t TCPStoreClient::receive(Deadline deadline) {
  // Grow only as bytes arrive (a reply's length field is not trusted with an allocation).
  if (rbuf_.size() - rlen_ < 1024) rbuf_.resize(std::max<size_t>(rbuf_.size() * 2, 4096));
  uint8_t* buf = rbuf_.data() + rlen_;
  const size_t space = rbuf_.size() - rlen_;
  auto lost = [&] {
    fail("lost the connection to the TCPStore server at " + addr_ + " (" + std::strerror(errno) +
         "); has the server (master rank or tpstore) exited?");
  };
  if (spin_.count() > 0 && g_clients.load(std::memory_order_relaxed) <= max_spinners()) {
    if (spin_skip_ > 0) {
      --spin_skip_;
    } else if (g_spinners.fetch_add(1, std::memory_order_relaxed) < max_spinners()) {
      // Busy-poll for a moment: the reply of a quick server lands within microseconds, while
      // sleeping in the kernel costs a wake-up of tens of them.
      auto until = std::chrono::steady_clock::now() + spin_;
      ssize_t n;
      do {
        n = ::recv(fd_.get(), buf, space, MSG_DONTWAIT);
        if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
        for (int i = 0; i < 16; ++i) cpu_relax();
      } while (std::chrono::steady_clock::now() < until);
      g_spinners.fetch_sub(1, std::memory_order_relaxed);
      if (n >= 0) {
        spin_misses_ = 0;
        return n;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) lost();
      // Missed: spin less often while replies keep taking longer than the spin.
      spin_misses_ = std::min(spin_misses_ + 1, 6);
      spin_skip_ = (1 << spin_misses_) - 1;
    } else {
      g_spinners.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  if (local_) {
    // On a Unix socket, sleep in poll(), then read. A thread asleep in recv() there is woken
    // each time the server reads our request (the kernel signals write space to every
    // sleeper on the socket), which costs a context switch for nothing; poll() filters the
    // wake-ups by event.
    while (true) {
      pollfd p{fd_.get(), POLLIN, 0};
      int rc = ::poll(&p, 1, deadline.poll_timeout_ms());
      if (rc < 0 && errno != EINTR) lost();
      if (rc > 0) {
        ssize_t n = ::recv(fd_.get(), buf, space, MSG_DONTWAIT);
        if (n >= 0) return n;
        if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) lost();
      }
      if (!deadline.is_never() && deadline.expired()) return -1;
    }
  }
  // Sleep in a blocking recv (one system call, no poll); SO_RCVTIMEO slices of at most 1 s
  // keep the deadline.
  constexpr int64_t kSliceUs = 1000000;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline.when() -
                                                                      Deadline::Clock::now());
    if (!deadline.is_never() && left.count() <= 0) return -1;
    int64_t want = deadline.is_never() ? kSliceUs : std::min<int64_t>(left.count(), kSliceUs);
    want = std::max<int64_t>(want, 1);
    if (want != rcvtimeo_us_ && (want < rcvtimeo_us_ || rcvtimeo_us_ < kSliceUs)) {
      timeval tv{static_cast<time_t>(want / 1000000), static_cast<suseconds_t>(want % 1000000)};
      ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      rcvtimeo_us_ = want;
    }
    ssize_t n = ::recv(fd_.get(), buf, space, 0);
    if (n >= 0) return n;
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    lost();
  }
}

uint32_t TCPStoreClient::read_reply(uint32_t id, uint32_t alt_id, Deadline deadline,
                                    const What& what) {
  // Drop the frames returned by the previous call (their views are no longer used).
  if (rpos_ > 0) {
    rlen_ -= rpos_;
    if (rlen_) std::memmove(rbuf_.data(), rbuf_.data() + rpos_, rlen_);
    rpos_ = 0;
  }
  if (rbuf_.capacity() > (4u << 20) && rlen_ == 0) {
    rbuf_.clear();
    rbuf_.shrink_to_fit();
  }
  while (true) {
    while (rpos_ < rlen_) {
      Header h;
      const uint8_t* p = rbuf_.data() + rpos_;
      size_t avail = rlen_ - rpos_;
      HeaderStatus st = store_wire::decode_header(p, avail, reply_limits_, &h);
      if (st == HeaderStatus::kNeedMore) break;
      if (st == HeaderStatus::kBadMagic) {
        fail(addr_ + " is not a tpcomm TCPStore server: it answered " + what.str() + " with '" +
             store_wire::printable_prefix(p, avail) +
             "'; is another program (an HTTP server, a PyTorch TCPStore) on that port?");
      }
      if (st == HeaderStatus::kBadVersion) {
        fail("the TCPStore at " + addr_ + " speaks protocol version " + std::to_string(h.version) +
             ", this client version " + std::to_string(store_wire::kVersion) +
             "; use the same tpcomm version for the server and every rank");
      }
      if (st == HeaderStatus::kTooLarge) {
        fail("the TCPStore at " + addr_ + " sent a reply of " + std::to_string(h.length) +
             " bytes, more than this client accepts; is it a tpcomm store?");
      }
      size_t frame = store_wire::kHeaderSize + static_cast<size_t>(h.length);
      if (avail < frame) break;  // receive() grows the buffer as the bytes arrive
      std::string err;
      if (!store_wire::decode_reply(h, p + store_wire::kHeaderSize, &reply_, &err)) {
        fail("malformed reply from the TCPStore at " + addr_ + " to " + what.str() + ": " + err);
      }
      rpos_ += frame;
      if (h.id == id || (alt_id != 0 && h.id == alt_id)) return h.id;
      auto ab = std::find(abandoned_.begin(), abandoned_.end(), h.id);
      if (ab != abandoned_.end()) {
        abandoned_.erase(ab);  // the late reply of a request that timed out
      } else if (reply_.op == static_cast<uint8_t>(Op::kError)) {
        // The failure of a set/append/multi_set sent without waiting for a reply.
        if (reply_.code == ErrorCode::kShuttingDown) {
          fail(std::string(reply_.message));
        }
        if (pending_error_.empty()) pending_error_ = std::string(reply_.message);
      }
    }
    // Keep unparsed bytes at the front and read more.
    if (rpos_ > 0) {
      rlen_ -= rpos_;
      if (rlen_) std::memmove(rbuf_.data(), rbuf_.data() + rpos_, rlen_);
      rpos_ = 0;
    }
    ssize_t n = receive(deadline);
    if (n < 0) return 0;
    if (n == 0) {
      fail("the TCPStore server at " + addr_ + " closed the connection during " + what.str() +
           (rlen_ ? " (in the middle of a reply)" : "") +
           "; has the server (master rank or tpstore) exited or been killed?");
    }
    rlen_ += static_cast<size_t>(n);
  }
}

void TCPStoreClient::remember_abandoned(uint32_t id) {
  if (abandoned_.size() >= kMaxAbandoned) abandoned_.erase(abandoned_.begin());
  abandoned_.push_back(id);
}

void TCPStoreClient::report_pending_error() {
  if (pending_error_.empty()) return;
  std::string msg = std::move(pending_error_);
  pending_error_.clear();
  throw StoreError("an earlier set/append/multi_set on the TCPStore at " + addr_ +
                   " failed (reported at this later call, which itself completed): " + msg);
}

const Reply& TCPStoreClient::call(uint32_t id, std::chrono::milliseconds timeout,
                                  const What& what) {
  Deadline deadline = Deadline::after(timeout);
  send_request(deadline, what);
  if (read_reply(id, 0, deadline, what) == 0) {
    remember_abandoned(id);
    throw TimeoutError("TCPStore at " + addr_ + ": no reply to " + what.str() + " within " +
                       std::to_string(timeout.count()) +
                       " ms; the server is overloaded or stopped (raise the store timeout if it "
                       "is just slow)");
  }
  return reply_;
}

const Reply& TCPStoreClient::call_blocking(uint32_t id, std::chrono::milliseconds timeout,
                                           const What& what) {
  Deadline deadline = Deadline::after(timeout);
  send_request(deadline, what);
  if (read_reply(id, 0, deadline, what) != 0) return reply_;
  // Timed out: take the request back from the server and learn which keys it still lacks.
  uint32_t cid = new_id();
  wbuf_.clear();
  Writer w(&wbuf_);
  w.begin(Op::kCancel, cid);
  w.u32(id);
  w.end();
  Deadline grace = Deadline::after(kCancelGrace);
  send_request(grace, What{"cancel", what.key, what.keys});
  uint32_t got = read_reply(id, cid, grace, what);
  if (got == id) {
    remember_abandoned(cid);  // the keys appeared just in time
    return reply_;
  }
  std::vector<std::string> missing;
  if (got == cid && reply_.op == static_cast<uint8_t>(Op::kKeys)) {
    for (std::string_view k : reply_.keys) missing.emplace_back(k);
  } else {
    remember_abandoned(id);
    remember_abandoned(cid);
  }
  size_t total = what.keys ? what.keys->size() : 1;
  if (missing.empty()) missing = what.keys ? *what.keys : std::vector<std::string>{*what.key};
  throw TimeoutError(store_util::missing_keys_message(
      std::string("TCPStore ") + what.op + " at " + addr_, missing, total, timeout));
}

void TCPStoreClient::expect(const Reply& r, Op op, const What& what) {
  if (r.op == static_cast<uint8_t>(Op::kError)) {
    std::string msg(r.message);
    if (r.code == ErrorCode::kBadFrame || r.code == ErrorCode::kShuttingDown)
      fail("TCPStore at " + addr_ + ": " + what.str() + " failed: " + msg);
    throw StoreError(msg + " [TCPStore at " + addr_ + "]");
  }
  if (r.op != static_cast<uint8_t>(op)) {
    fail("TCPStore at " + addr_ + ": unexpected reply '" +
         store_wire::op_name(static_cast<Op>(r.op)) + "' to " + what.str());
  }
  report_pending_error();
}

// ---- operations ------------------------------------------------------------------------------

void TCPStoreClient::set(const std::string& key, const Bytes& value,
                         std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lk(mu_);
  throw_if_broken();
  check_key("set", key);
  check_value("set", key, value.size());
  wbuf_.clear();
  Writer w(&wbuf_);
  w.begin(Op::kSet, new_id(), store_wire::kFlagNoReply);
  w.str(key);
  w.str(value.data(), value.size());
  w.end();
  send_request(Deadline::after(timeout), What{"set", &key});
}

Bytes TCPStoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lk(mu_);
  throw_if_broken();
  check_key("get", key);
  uint32_t id = new_id();
  wbuf_.clear();
  Writer w(&wbuf_);
  w.begin(Op::kGet, id);
  w.str(key);
  w.end();
  const What what{"get", &key};
  const Reply& r = call_blocking(id, timeout, what);
  expect(r, Op::kValue, what);
  return Bytes(r.value.begin(), r.value.end());
}

int64_t TCPStoreClient::add(const std::string& key, int64_t delta,
                            std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lk(mu_);
  throw_if_broken();
  check_key("add", key);
  uint32_t id = new_id();
  wbuf_.clear();
  Writer w(&wbuf_);
  w.begin(Op::kAdd, id);
  w.str(key);
  w.i64(delta);
  w.end();
  const What what{"add", &key};
  const Reply& r = call(id, timeout, what);
  expect(r, Op::kInt, what);
  return r.integer;
}

Bytes TCPStoreClient::compare_set(const std::string& key, const Bytes& expected,
                                  const Bytes& desired, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lk(mu_);
  throw_if_broken();
  check_key("compare_set", key);
  check_value("compare_set", key, std::max(expected.size(), desired.size()));
  uint32_t id = new_id();
  wbuf_.clear();
  Writer w(&wbuf_);
  w.begin(Op::kCompareSet, id);
  w.str(key);
  w.str(expected.data(), expected.size());
  w.str(desired.data(), desired.size());
  w.end();
  check_frame("compare_set");
  const What what{"compare_set", &key};
  const Reply& r = call(id, timeout, what);
  expect(r, Op::kValue, what);
  return Bytes(r.value.begin(), r.value.end());
}

bool TCPStoreClient::delete_key(const std::string& key, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lk(mu_);
  throw_if_broken();
  check_key("delete_key", key);
  uint32_t id = new_id();
  wbuf_.clear();
  Writer w(&wbuf_);
  w.begin(Op::kDelete, id);
  w.str(key);
  w.end();
  const What what{"delete_key", &key};
  const Reply& r = call(id, timeout, what);
  expect(r, Op::kInt, what);
  return r.integer != 0;
}

bool TCPStoreClient::check(const std::vector<std::string>& keys,
                           std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lk(mu_);
  throw_if_broken();
  uint32_t id = new_id();
  wbuf_.clear();
  Writer w(&wbuf_);
  w.begin(Op::kCheck, id);
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const std::string& k : keys) {
    check_key("check", k);
    w.str(k);
  }
  w.end();
  check_frame("check");
  const What what{"check", nullptr, &keys};
  const Reply& r = call(id, timeout, what);
  expect(r, Op::kInt, what);
  return r.integer != 0;
}

void TCPStoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lk(mu_);
  throw_if_broken();
  uint32_t id = new_id();
  wbuf_.clear();
  Writer w(&wbuf_);
  w.begin(Op::kWait, id);
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const std::string& k : keys) {
    check_key("wait", k);
    w.str(k);
  }
  w.end();
  check_frame("wait");
  const What what{"wait", nullptr, &keys};
  const Reply& r = call_blocking(id, timeout, what);
  expect(r, Op::kOk, what);
}

int64_t TCPStoreClient::num_keys(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lk(mu_);
  throw_if_broken();
  uint32_t id = new_id();
  wbuf_.clear();
  Writer w(&wbuf_);
  w.begin(Op::kNumKeys, id);
  w.end();
  const What what{"num_keys()"};
  const Reply& r = call(id, timeout, what);
  expect(r, Op::kInt, what);
  return r.integer;
}

void TCPStoreClient::append(const std::string& key, const Bytes& value,
                            std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lk(mu_);
  throw_if_broken();
  check_key("append", key);
  check_value("append", key, value.size());
  wbuf_.clear();
  Writer w(&wbuf_);
  w.begin(Op::kAppend, new_id(), store_wire::kFlagNoReply);
  w.str(key);
  w.str(value.data(), value.size());
  w.end();
  send_request(Deadline::after(timeout), What{"append", &key});
}

std::vector<Bytes> TCPStoreClient::multi_get(const std::vector<std::string>& keys,
                                             std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lk(mu_);
  throw_if_broken();
  uint32_t id = new_id();
  wbuf_.clear();
  Writer w(&wbuf_);
  w.begin(Op::kMultiGet, id);
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const std::string& k : keys) {
    check_key("multi_get", k);
    w.str(k);
  }
  w.end();
  check_frame("multi_get");
  const What what{"multi_get", nullptr, &keys};
  const Reply& r = call_blocking(id, timeout, what);
  expect(r, Op::kValues, what);
  if (r.values.size() != keys.size()) {
    fail("TCPStore at " + addr_ + ": multi_get of " + std::to_string(keys.size()) +
         " keys answered with " + std::to_string(r.values.size()) + " values");
  }
  std::vector<Bytes> out;
  out.reserve(keys.size());
  for (const auto& v : r.values) out.emplace_back(v.begin(), v.end());
  return out;
}

void TCPStoreClient::multi_set(const std::vector<std::string>& keys,
                               const std::vector<Bytes>& values,
                               std::chrono::milliseconds timeout) {
  store_util::check_multi_set(keys, values);
  std::lock_guard<std::mutex> lk(mu_);
  throw_if_broken();
  wbuf_.clear();
  Writer w(&wbuf_);
  w.begin(Op::kMultiSet, new_id(), store_wire::kFlagNoReply);
  w.u32(static_cast<uint32_t>(keys.size()));
  for (size_t i = 0; i < keys.size(); ++i) {
    check_key("multi_set", keys[i]);
    check_value("multi_set", keys[i], values[i].size());
    w.str(keys[i]);
    w.str(values[i].data(), values[i].size());
  }
  w.end();
  check_frame("multi_set");
  send_request(Deadline::after(timeout), What{"multi_set", nullptr, &keys});
}

}  // namespace tpcomm
