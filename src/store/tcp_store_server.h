// The TCPStore server: one thread, one epoll set, every client on one persistent connection.
// Used inside the master rank (TCPStore with is_master) and by the `tpstore` program.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core/deadline.h"

namespace tpcomm {

/// Settings of a server; from_registry() fills the limits from TPCOMM_STORE_* variables.
struct TCPStoreServerConfig {
  std::string host;   ///< address to listen on ("" = every address)
  uint16_t port = 0;  ///< 0 picks a free port (read it back with TCPStoreServer::port())
  std::string job_id = "default";
  int backlog = 4096;
  uint64_t max_key = 4096;
  uint64_t max_value = 256ull << 20;
  int max_clients = 65536;
  std::chrono::microseconds spin{50};
  /// A connection that has not completed its hello after this long is closed (0: never).
  std::chrono::milliseconds handshake_timeout{5000};
  /// Also listen on an abstract Unix-domain socket that clients of this host switch to.
  bool local_socket = true;

  /// Reads TPCOMM_STORE_BACKLOG, _MAX_KEY, _MAX_VALUE, _MAX_CLIENTS, _SPIN,
  /// _HANDSHAKE_TIMEOUT and _LOCAL_SOCKET.
  static TCPStoreServerConfig from_registry(std::string host, uint16_t port, std::string job_id);
};

/// Resolves the job id of a store: the explicit one, else TPCOMM_JOB_ID, else "default".
std::string resolve_store_job_id(const std::string& explicit_id);

/// Reads TPCOMM_STORE_SPIN with microsecond resolution (the registry's durations are ms).
std::chrono::microseconds store_spin_from_registry();

/// An event-driven key-value server. The constructor binds and starts the thread (throws
/// TransportError when it cannot listen); the destructor stops it and joins (bounded: the
/// thread never blocks outside epoll_wait, which the stop request wakes).
class TCPStoreServer {
 public:
  explicit TCPStoreServer(const TCPStoreServerConfig& config);
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  /// The bound port.
  uint16_t port() const;
  /// "host:port" as clients should see it in messages.
  std::string address() const;
  /// Name of the abstract Unix socket local clients use ("" when there is none).
  std::string local_socket_name() const;

  /// Clients other than the master's own that completed the handshake since the start.
  int workers_joined() const;
  /// Client connections open now (handshaken or not).
  int connections() const;

  /// Blocks until `n` workers have joined; throws TimeoutError saying how many of how many
  /// joined when the deadline passes.
  void wait_for_workers(int n, Deadline deadline, std::chrono::milliseconds timeout);

  /// Stops the thread and closes every connection (idempotent; the destructor calls it).
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpcomm
