// Key-value stores used to bootstrap a job: ranks publish addresses and meet at barriers.
// Semantics follow torch.distributed's c10d stores (set/get/add/compare_set/wait/...).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tpcomm {

/// Values are raw bytes.
using Bytes = std::vector<uint8_t>;

/// Converts between byte values and strings.
inline Bytes to_bytes(std::string_view s) { return Bytes(s.begin(), s.end()); }
inline std::string to_string(const Bytes& b) { return std::string(b.begin(), b.end()); }

/// Abstract key-value store. Every blocking call has a deadline (the store's timeout unless
/// one is given) and throws TimeoutError naming the keys it waited for when it passes.
/// Counters made by add() are stored as decimal ASCII, so get() on them reads "42".
class Store {
 public:
  /// Default timeout of blocking calls, as torch's default store timeout.
  static constexpr std::chrono::milliseconds kDefaultTimeout{300000};

  virtual ~Store() = default;

  /// Sets key to value (overwrites).
  virtual void set(const std::string& key, const Bytes& value) = 0;
  void set(const std::string& key, std::string_view value) { set(key, to_bytes(value)); }

  /// Returns the value of key, blocking until it exists or the timeout passes.
  virtual Bytes get(const std::string& key) = 0;
  std::string get_string(const std::string& key) { return to_string(get(key)); }

  /// Atomically adds delta to the integer counter at key (created at 0) and returns the new
  /// value. Throws StoreError if the key holds something that is not an integer.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  /// If key holds `expected` (or is absent and `expected` is empty), sets it to `desired`.
  /// Returns the value held after the call (as torch: `expected` if absent and non-empty).
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;

  /// Deletes key; returns whether it existed.
  virtual bool delete_key(const std::string& key) = 0;

  /// True if all keys exist (does not block).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  /// check() that gives the store at most `timeout` to answer (a TCPStore whose server does
  /// not answer in time throws TimeoutError); stores that answer locally ignore it. The
  /// library's checks inside a collective use it, so that a stopped server cannot hold the
  /// call past its deadline.
  virtual bool check_within(const std::vector<std::string>& keys,
                            std::chrono::milliseconds /*timeout*/) {
    return check(keys);
  }

  /// Blocks until all keys exist, or throws TimeoutError naming the missing ones.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

  /// Number of keys held.
  virtual int64_t num_keys() = 0;

  /// Appends value to key's value (creating it).
  virtual void append(const std::string& key, const Bytes& value) = 0;

  /// get() of several keys in one round trip; blocks until all exist.
  virtual std::vector<Bytes> multi_get(const std::vector<std::string>& keys) = 0;

  /// set() of several keys in one round trip. Sizes must match.
  virtual void multi_set(const std::vector<std::string>& keys,
                         const std::vector<Bytes>& values) = 0;

  /// Changes the timeout of later blocking calls.
  virtual void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 protected:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

/// Options of a TCPStore beyond torch's constructor arguments.
struct TCPStoreOptions {
  /// Job identifier carried in the handshake; a client of another job is refused. Empty:
  /// taken from TPCOMM_JOB_ID (tprun sets it), else "default".
  std::string job_id;
  /// Server only: how many clients must connect before the constructor returns when
  /// wait_for_workers is true (world_size - 1 if -1 and world_size is known).
  int world_size = -1;
  bool is_master = false;
  bool wait_for_workers = true;
  std::chrono::milliseconds timeout = Store::kDefaultTimeout;
  /// Server only: also run a client in this process (false for the tpstore program).
  bool server_only = false;
};

class TCPStoreServer;
class TCPStoreClient;

/// A store served over TCP by one process (rank 0, or the standalone `tpstore` program) and
/// reached by every other through one persistent connection each. The server is event
/// driven (one thread, epoll); blocking gets and waits are parked on the server and
/// answered when their keys appear.
///
/// Semantics beyond Store's:
/// - set(), append() and multi_set() return once the request is written to the socket; they
///   do not wait for the server (as PyTorch's set). The server applies the requests of one
///   client in order, so every later call of this client, and everything others see of it,
///   comes after the write. Sizes are checked before sending against the server's limits
///   (TPCOMM_STORE_MAX_KEY, TPCOMM_STORE_MAX_VALUE, learnt at connection); a request the
///   server still refuses (append growing a value over the limit) is reported as a
///   StoreError by the next call of this client that waits for a reply.
/// - A client of another job (TCPStoreOptions::job_id, else TPCOMM_JOB_ID, else "default")
///   or another program is refused; StoreError says why.
/// - Every call has a deadline (the timeout, or wait()'s own): TimeoutError names the keys
///   still missing or the call that got no reply; a server that is gone gives a StoreError
///   naming host:port, and every later call fails the same way.
/// - One request is in flight per TCPStore: calls from several threads are serialised.
/// - A client on the server's host moves to a Unix-domain socket the server offers during the
///   handshake (loopback TCP costs more kernel work per request); TPCOMM_STORE_LOCAL_SOCKET=0
///   keeps it on TCP. Messages still name host:port.
class TCPStore : public Store {
 public:
  /// Connects to host:port; when is_master, first starts the server there (port 0 picks a
  /// free port: read it back with port()). With wait_for_workers, the master waits until
  /// world_size - 1 other clients have connected.
  TCPStore(std::string host, uint16_t port, int world_size = -1, bool is_master = false,
           std::chrono::milliseconds timeout = kDefaultTimeout, bool wait_for_workers = true);
  TCPStore(std::string host, uint16_t port, const TCPStoreOptions& options);
  ~TCPStore() override;
  TCPStore(const TCPStore&) = delete;
  TCPStore& operator=(const TCPStore&) = delete;

  /// The port the server listens on (the bound one when 0 was asked).
  uint16_t port() const { return port_; }
  const std::string& host() const { return host_; }

  void set(const std::string& key, const Bytes& value) override;
  using Store::set;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  bool check_within(const std::vector<std::string>& keys,
                    std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  int64_t num_keys() override;
  void append(const std::string& key, const Bytes& value) override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  void set_timeout(std::chrono::milliseconds timeout) override;

 private:
  std::string host_;
  uint16_t port_ = 0;
  std::unique_ptr<TCPStoreServer> server_;
  std::unique_ptr<TCPStoreClient> client_;
};

/// A store kept in one file, shared by processes of one host or of several hosts on a
/// shared file system (fcntl locks). Records are appended with a checksum, so a writer killed
/// mid-write leaves the file readable; a corrupt or truncated file gives a StoreError naming
/// the path and offset. With world_size > 0 the file is removed when the last user closes it
/// (as torch's FileStore); a process killed before closing never releases its reference, so the
/// file then stays: delete it after the job.
class FileStore : public Store {
 public:
  explicit FileStore(std::string path, int world_size = -1);
  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  const std::string& path() const { return path_; }

  void set(const std::string& key, const Bytes& value) override;
  using Store::set;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  int64_t num_keys() override;
  void append(const std::string& key, const Bytes& value) override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;

 private:
  struct State;
  std::string path_;
  int world_size_;
  std::unique_ptr<State> state_;
};

/// An in-process store (threads of one process), for tests and single-process jobs.
class HashStore : public Store {
 public:
  HashStore();
  ~HashStore() override;

  void set(const std::string& key, const Bytes& value) override;
  using Store::set;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  int64_t num_keys() override;
  void append(const std::string& key, const Bytes& value) override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// A view of another store in which every key is prefixed with "<prefix>/", so that
/// groups and subsystems sharing one store never collide.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store);

  const std::string& prefix() const { return prefix_; }
  /// The store this one wraps.
  const std::shared_ptr<Store>& underlying() const { return store_; }

  void set(const std::string& key, const Bytes& value) override;
  using Store::set;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  bool check_within(const std::vector<std::string>& keys,
                    std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  /// Keys of the underlying store (all prefixes), as torch's PrefixStore reports.
  int64_t num_keys() override;
  void append(const std::string& key, const Bytes& value) override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  void set_timeout(std::chrono::milliseconds timeout) override;

 private:
  std::string join(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> join(const std::vector<std::string>& keys) const;
  std::string prefix_;
  std::shared_ptr<Store> store_;
};

}  // namespace tpcomm
