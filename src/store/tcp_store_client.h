// The TCPStore client: one persistent connection to the server, one request in flight at a
// time (calls of several threads are serialised), a deadline on every call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/deadline.h"
#include "net/socket.h"
#include "store/tcp_store_wire.h"
#include "tpcomm/store.hpp"

namespace tpcomm {

/// A connection to a TCPStoreServer. Every call takes its timeout; the connection is made
/// (with retries) and the handshake done in the constructor. When the connection is lost
/// every later call throws StoreError naming the server's host:port.
class TCPStoreClient {
 public:
  /// Connects to host:port within `timeout` and introduces itself as a client of `job_id`.
  /// `master_self`: the master's own client (not counted by wait_for_workers).
  TCPStoreClient(const std::string& host, uint16_t port, const std::string& job_id,
                 std::chrono::milliseconds timeout, bool master_self);
  ~TCPStoreClient();
  TCPStoreClient(const TCPStoreClient&) = delete;
  TCPStoreClient& operator=(const TCPStoreClient&) = delete;

  /// "host:port" of the server.
  const std::string& address() const { return addr_; }
  /// True when the connection moved to the server's local (Unix-domain) socket.
  bool uses_local_socket() const { return local_; }

  void set(const std::string& key, const Bytes& value, std::chrono::milliseconds timeout);
  Bytes get(const std::string& key, std::chrono::milliseconds timeout);
  int64_t add(const std::string& key, int64_t delta, std::chrono::milliseconds timeout);
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired,
                    std::chrono::milliseconds timeout);
  bool delete_key(const std::string& key, std::chrono::milliseconds timeout);
  bool check(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  int64_t num_keys(std::chrono::milliseconds timeout);
  void append(const std::string& key, const Bytes& value, std::chrono::milliseconds timeout);
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout);
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values,
                 std::chrono::milliseconds timeout);

 private:
  // Names a call in messages ("get('k')"); built into text only when a message needs it.
  struct What {
    const char* op;
    const std::string* key = nullptr;
    const std::vector<std::string>* keys = nullptr;
    std::string str() const;
  };

  uint32_t new_id();
  void handshake(const std::string& job_id, bool master_self, Deadline deadline,
                 std::chrono::milliseconds timeout);
  // Sends one HELLO with `flags` and reads its reply into reply_ (throws as the handshake).
  void hello_round(const std::string& job_id, uint32_t flags, Deadline deadline,
                   std::chrono::milliseconds timeout);
  // Connects to the abstract Unix socket `name`; an invalid Fd when that fails.
  static net::Fd connect_local(std::string_view name);
  void check_key(const char* op, const std::string& key) const;
  void check_value(const char* op, const std::string& key, size_t size) const;
  void check_frame(const char* op) const;
  void throw_if_broken() const;
  [[noreturn]] void fail(const std::string& msg);
  // Sends wbuf_ (throws StoreError when the connection is lost).
  void send_request(Deadline deadline, const What& what);
  // Reads until the reply to `id` (or `alt_id`, when not 0) arrives: returns the matching id,
  // or 0 at the deadline. reply_ then holds the reply (views valid until the next read).
  uint32_t read_reply(uint32_t id, uint32_t alt_id, Deadline deadline, const What& what);
  // Sends the request in wbuf_ and returns its reply; timeouts throw TimeoutError.
  const store_wire::Reply& call(uint32_t id, std::chrono::milliseconds timeout, const What& what);
  // Same for GET/WAIT/MULTI_GET: on timeout, cancels the parked request on the server and
  // throws TimeoutError naming the keys still missing.
  const store_wire::Reply& call_blocking(uint32_t id, std::chrono::milliseconds timeout,
                                         const What& what);
  // Throws StoreError for an ERROR reply; checks the reply's op otherwise.
  void expect(const store_wire::Reply& r, store_wire::Op op, const What& what);
  void remember_abandoned(uint32_t id);
  // Waits for bytes: a short busy-poll, then poll(). Returns >0 bytes read, 0 on EOF, -1 at
  // the deadline.
  ssize_t receive(Deadline deadline);
  void report_pending_error();

  std::mutex mu_;
  std::string addr_;
  std::string peer_name_;  // "TCPStore host:port" for socket-level messages
  std::string job_id_;
  std::string secret_;  ///< TPCOMM_AUTH_SECRET ("": none; a challenging server is refused)
  net::Fd fd_;
  uint32_t next_id_ = 1;
  std::vector<uint8_t> wbuf_;
  std::vector<uint8_t> rbuf_;
  size_t rlen_ = 0;  // bytes in rbuf_
  size_t rpos_ = 0;  // start of the first unparsed frame
  store_wire::Reply reply_;
  store_wire::Limits limits_;        // the server's, from the handshake
  store_wire::Limits reply_limits_;  // what this client accepts in a reply
  std::string broken_;               // why the connection is unusable ("" = fine)
  std::string pending_error_;        // a failed set/append/multi_set (no reply was awaited)
  std::vector<uint32_t> abandoned_;  // ids of requests given up on (late replies dropped)
  std::chrono::microseconds spin_{0};
  int64_t rcvtimeo_us_ = 0;  // SO_RCVTIMEO now set on the socket (0 = none)
  int spin_skip_ = 0;        // calls left before the next busy-poll attempt
  int spin_misses_ = 0;      // consecutive busy-polls that found nothing
  bool local_ = false;       // on the server's Unix-domain socket
};

}  // namespace tpcomm
