// Internals of the TCPStore server, shared by its event loop (tcp_store_server.cc) and its
// key-value operations (tcp_store_server_ops.cc). Everything here runs on the server thread
// except the members marked otherwise.
#pragma once

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/tcp_store_server.h"
#include "store/tcp_store_wire.h"
#include "tpcomm/store.hpp"

namespace tpcomm {

/// Hash that accepts std::string and std::string_view alike (lookups without a copy).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

/// A receive buffer that grows only as bytes actually arrive (a frame header may claim any
/// length; memory follows what the peer really sent), without zero-filling.
struct InBuffer {
  std::unique_ptr<uint8_t[]> data;
  size_t cap = 0;
  size_t len = 0;
  size_t want = 0;  // size of the frame being received, when known

  void grow() {
    size_t ncap = cap ? cap * 2 : 1024;
    if (want > ncap && cap >= 65536) ncap = std::min(want, cap * 4);
    auto n = std::make_unique<uint8_t[]>(ncap);
    if (len) std::memcpy(n.get(), data.get(), len);
    data = std::move(n);
    cap = ncap;
  }
  // Drops the first `n` bytes (processed frames).
  void consume(size_t n) {
    if (n == 0) return;
    len -= n;
    if (len) std::memmove(data.get(), data.get() + n, len);
    if (len == 0 && cap > (1u << 20)) clear();
  }
  void clear() {
    data.reset();
    cap = len = want = 0;
  }
};

/// One client connection.
struct Conn {
  int fd = -1;
  uint64_t id = 0;     // unique over the server's life (fds are reused)
  std::string peer;    // "127.0.0.1:40000"
  std::string client;  // "host:pid" from the hello
  InBuffer in;
  uint64_t skip = 0;    // payload bytes of an over-limit frame still to discard
  uint64_t frames = 0;  // valid frames processed
  std::vector<uint8_t> out;
  size_t out_pos = 0;
  uint32_t ev_mask = 0;
  bool hello = false;
  bool asked_local = false;  // asked for the local socket (leaves silently when it moves)
  bool dead = false;
  bool dirty = false;
  bool paused = false;  // not reading: too many unread replies
  bool close_after_flush = false;
  bool challenged = false;                            // shared-secret challenge sent
  std::array<uint8_t, 16> nonce{};                    // the challenge's nonce
  std::vector<std::pair<uint32_t, uint64_t>> parked;  // (request id, waiter id)
};

/// A GET, WAIT or MULTI_GET parked until its keys exist. It is registered under one missing
/// key at a time; when that key appears it moves to the next missing one, or is answered.
struct Waiter {
  int fd = -1;
  uint64_t conn_id = 0;
  uint32_t req_id = 0;
  uint8_t op = 0;
  std::vector<std::string> keys;
};

struct TCPStoreServer::Impl {
  explicit Impl(const TCPStoreServerConfig& c);
  ~Impl();

  // Event loop (tcp_store_server.cc).
  void run();
  void stop();
  void close_fds();
  void accept_clients(int lfd);
  void open_local_socket();
  static void SockAddr_to_text(const sockaddr_storage& ss, socklen_t len, std::string* out);
  void on_readable(Conn& c);
  void process_input(Conn& c);
  void refuse_foreign(Conn& c, const uint8_t* p, size_t n);
  void handle_hello(Conn& c, const store_wire::Header& h, const uint8_t* payload);
  void reply_error(Conn& c, uint32_t id, store_wire::ErrorCode code, const std::string& msg);
  void mark_dirty(Conn& c);
  void flush_dirty();
  void flush(Conn& c);
  void update_events(Conn& c);
  void close_conn(Conn& c, const std::string& why);
  void bury_dead();
  void shutdown_all();
  // Closes connections whose handshake is overdue; returns the epoll timeout (ms, -1 = none)
  // until the next one is due.
  int expire_handshakes();

  // Operations (tcp_store_server_ops.cc).
  void handle_frame(Conn& c, const store_wire::Header& h, const uint8_t* payload);
  void put_value(std::string_view key, std::span<const uint8_t> value);
  void notify(std::string_view key);
  const std::string* first_missing(const Waiter& w) const;
  void park(Conn& c, const store_wire::Request& r);
  void watch_key(const std::string& key, uint64_t waiter_id);
  void answer(Conn& c, uint32_t req_id, uint8_t op, const std::vector<std::string>& keys);
  void answer_views(Conn& c, uint32_t req_id, uint8_t op,
                    const std::vector<std::string_view>& keys);
  void complete(uint64_t waiter_id);
  void cancel(Conn& c, uint32_t cancel_id, uint32_t target);
  void drop_parked(Conn& c);

  TCPStoreServerConfig cfg;
  store_wire::Limits limits;
  std::string addr;       // "host:port" for messages
  std::string self_desc;  // "host:pid"
  std::string secret;     // TPCOMM_AUTH_SECRET ("": clients are not challenged)
  /// Shared secret: challenges a client whose hello passed, or checks its response (strips
  /// it from c.client and sets `*note` to the server's proof). False: answered, stop here.
  bool authenticate(Conn& c, uint32_t req_id, std::string* note);
  uint16_t bound_port = 0;
  int listen_fd = -1, wake_fd = -1, epoll_fd = -1, reserve_fd = -1;
  int local_fd = -1;       // abstract Unix socket for clients of this host (-1: none)
  std::string local_name;  // its name without the leading NUL
  std::thread thread;
  std::atomic<bool> stopping{false};
  int spin_hits = 1;
  int spin_client_limit = 1;  // busy-poll only while at most this many clients are connected

  std::vector<std::unique_ptr<Conn>> conns;  // by fd
  std::vector<std::pair<int, uint64_t>> dirty;
  std::vector<int> graveyard;  // closed at the end of the batch (no fd reuse within it)
  // Connections without a completed hello, in accept order (= deadline order): fd, conn id,
  // deadline. Entries of connections that said hello or closed are dropped lazily.
  struct PendingHello {
    int fd;
    uint64_t id;
    std::chrono::steady_clock::time_point due;
  };
  std::deque<PendingHello> pending_hello;
  uint64_t handshake_timeouts = 0;  // connections closed for it (the first few are WARNed)
  uint64_t next_conn_id = 1;
  int open_conns = 0;
  int clients = 0;  // handshaken
  std::atomic<int> conn_count{0};

  std::unordered_map<std::string, Bytes, StringHash, std::equal_to<>> data;
  std::unordered_map<uint64_t, Waiter> waiters;
  std::unordered_map<std::string, std::vector<uint64_t>, StringHash, std::equal_to<>> watch;
  uint64_t next_waiter = 1;
  store_wire::Request req;  // reused decode target

  // Read by other threads (wait_for_workers).
  mutable std::mutex join_mu;
  std::condition_variable join_cv;
  int joined = 0;
};

}  // namespace tpcomm
