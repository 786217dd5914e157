// Rendezvous: turn an init_method URL into a store shared by all ranks, plus this process's
// rank and the world size (torch.distributed's rendezvous, in C++).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "tpcomm/store.hpp"

namespace tpcomm {

/// What a rendezvous produces.
struct RendezvousResult {
  std::shared_ptr<Store> store;
  int rank = -1;
  int world_size = -1;
};

/// A handler for one URL scheme. rank and world_size are -1 when the caller leaves them to
/// the URL or the environment.
using RendezvousHandler = std::function<RendezvousResult(
    const std::string& url, int rank, int world_size, std::chrono::milliseconds timeout)>;

/// Registers (or replaces) the handler for `scheme` ("env", "tcp", "file", or a new one).
void register_rendezvous_handler(const std::string& scheme, RendezvousHandler handler);

/// Runs the handler of the URL's scheme. Built in:
///   env://                        MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
///   tcp://host:port?rank=R&world_size=N
///   file:///path?rank=R&world_size=N
/// rank/world_size arguments override the URL's; a value given both ways must agree. For env://
/// and tcp://, rank 0 starts the TCPStore server, unless TPCOMM_USE_AGENT_STORE=1 (set by tprun,
/// which then hosts it) makes every rank a client. The store returned is the raw one.
/// Throws InvalidArgument naming what is missing ("env:// needs MASTER_PORT: ...").
RendezvousResult rendezvous(const std::string& url, int rank = -1, int world_size = -1,
                            std::chrono::milliseconds timeout = Store::kDefaultTimeout);

}  // namespace tpcomm
