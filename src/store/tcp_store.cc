// TCPStore: the public class, a server (when master) plus a client.
#include "core/deadline.h"
#include "store/tcp_store_client.h"
#include "store/tcp_store_server.h"
#include "tpcomm/error.hpp"
#include "tpcomm/store.hpp"

namespace tpcomm {

namespace {

// Where the master's own client connects when the server listens on every address.
std::string connect_host(const std::string& host) {
  if (host.empty() || host == "0.0.0.0" || host == "*") return "127.0.0.1";
  if (host == "::" || host == "[::]") return "::1";
  return host;
}

TCPStoreOptions make_options(int world_size, bool is_master, std::chrono::milliseconds timeout,
                             bool wait_for_workers) {
  TCPStoreOptions o;
  o.world_size = world_size;
  o.is_master = is_master;
  o.timeout = timeout;
  o.wait_for_workers = wait_for_workers;
  return o;
}

TCPStoreClient& need(const std::unique_ptr<TCPStoreClient>& c, const std::string& host,
                     uint16_t port) {
  if (!c) {
    throw InvalidArgument("this TCPStore (" + host + ":" + std::to_string(port) +
                          ") was made with server_only = true and has no client; open another "
                          "TCPStore with is_master = false to use it");
  }
  return *c;
}

}  // namespace

TCPStore::TCPStore(std::string host, uint16_t port, int world_size, bool is_master,
                   std::chrono::milliseconds timeout, bool wait_for_workers)
    : TCPStore(std::move(host), port,
               make_options(world_size, is_master, timeout, wait_for_workers)) {}

TCPStore::TCPStore(std::string host, uint16_t port, const TCPStoreOptions& options)
    : host_(std::move(host)), port_(port) {
  timeout_ = options.timeout;
  const std::string job = resolve_store_job_id(options.job_id);
  Deadline deadline = Deadline::after(options.timeout);
  if (options.is_master) {
    server_ =
        std::make_unique<TCPStoreServer>(TCPStoreServerConfig::from_registry(host_, port, job));
    port_ = server_->port();
  }
  if (!options.is_master || !options.server_only) {
    client_ = std::make_unique<TCPStoreClient>(connect_host(host_), port_, job,
                                               deadline.remaining(), options.is_master);
  }
  if (options.is_master && options.wait_for_workers && options.world_size > 0) {
    int expected = options.server_only ? options.world_size : options.world_size - 1;
    server_->wait_for_workers(expected, deadline, options.timeout);
  }
}

TCPStore::~TCPStore() {
  client_.reset();  // close our connection first, then stop and join the server thread
  server_.reset();
}

void TCPStore::set(const std::string& key, const Bytes& value) {
  need(client_, host_, port_).set(key, value, timeout_);
}

Bytes TCPStore::get(const std::string& key) {
  return need(client_, host_, port_).get(key, timeout_);
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  return need(client_, host_, port_).add(key, delta, timeout_);
}

Bytes TCPStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return need(client_, host_, port_).compare_set(key, expected, desired, timeout_);
}

bool TCPStore::delete_key(const std::string& key) {
  return need(client_, host_, port_).delete_key(key, timeout_);
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  return need(client_, host_, port_).check(keys, timeout_);
}
bool TCPStore::check_within(const std::vector<std::string>& keys,
                            std::chrono::milliseconds timeout) {
  return need(client_, host_, port_).check(keys, std::min(timeout, timeout_));
}

void TCPStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  need(client_, host_, port_).wait(keys, timeout);
}

int64_t TCPStore::num_keys() { return need(client_, host_, port_).num_keys(timeout_); }

void TCPStore::append(const std::string& key, const Bytes& value) {
  need(client_, host_, port_).append(key, value, timeout_);
}

std::vector<Bytes> TCPStore::multi_get(const std::vector<std::string>& keys) {
  return need(client_, host_, port_).multi_get(keys, timeout_);
}

void TCPStore::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  need(client_, host_, port_).multi_set(keys, values, timeout_);
}

void TCPStore::set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

}  // namespace tpcomm
