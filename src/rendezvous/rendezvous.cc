// Rendezvous: a registry of URL-scheme handlers, and the built-in env://, tcp:// and file://.
// Rank 0 hosts the TCPStore for env:// and tcp://, unless TPCOMM_USE_AGENT_STORE says that
// the launcher (tprun) already serves it, in which case every rank is a client.
#include "tpcomm/rendezvous.hpp"

#include <map>
#include <mutex>
#include <optional>

#include "core/config.h"
#include "core/log.h"
#include "rendezvous/url.h"
#include "tpcomm/error.hpp"

namespace tpcomm {
namespace {

using rdzv::Url;

struct HandlerRegistry {
  std::mutex mu;
  std::map<std::string, RendezvousHandler> handlers;
};

RendezvousResult env_handler(const std::string& url, int rank, int world_size,
                             std::chrono::milliseconds timeout);
RendezvousResult tcp_handler(const std::string& url, int rank, int world_size,
                             std::chrono::milliseconds timeout);
RendezvousResult file_handler(const std::string& url, int rank, int world_size,
                              std::chrono::milliseconds timeout);

HandlerRegistry& handlers() {
  static auto* r = [] {
    auto* reg = new HandlerRegistry;  // never destroyed: usable during static teardown
    reg->handlers["env"] = env_handler;
    reg->handlers["tcp"] = tcp_handler;
    reg->handlers["file"] = file_handler;
    return reg;
  }();
  return *r;
}

// Parses a rank or world size from the URL query.
std::optional<int64_t> query_int(const Url& u, const std::string& name) {
  auto it = u.query.find(name);
  if (it == u.query.end()) return std::nullopt;
  auto v = config::parse_int(it->second);
  if (!v || *v < 0 || *v > (int64_t{1} << 30)) {
    throw InvalidArgument("malformed rendezvous URL '" + u.text + "': bad " + name + " '" +
                          it->second + "' (expected a non-negative integer)");
  }
  return v;
}

// Refuses query parameters a built-in scheme does not know (typos would be silently ignored).
void check_query_names(const Url& u) {
  for (const auto& [name, value] : u.query) {
    if (name != "rank" && name != "world_size") {
      throw InvalidArgument("malformed rendezvous URL '" + u.text + "': unknown query parameter '" +
                            name + "' (" + u.scheme + ":// takes rank and world_size)");
    }
  }
}

// One of rank / world_size from, in order: the argument, the URL, the environment. The
// argument and the URL must agree when both give it. `how` says how to provide it.
int pick(const Url& u, const std::string& name, int arg, std::optional<int64_t> env,
         const std::string& how) {
  auto from_url = query_int(u, name);
  if (arg != -1 && from_url && *from_url != arg) {
    throw InvalidArgument("rendezvous('" + u.text + "'): " + name + " is " +
                          std::to_string(*from_url) + " in the URL but " + std::to_string(arg) +
                          " was passed; give it one way, or make both agree");
  }
  if (arg != -1) return arg;
  if (from_url) return static_cast<int>(*from_url);
  if (env) return static_cast<int>(*env);
  throw InvalidArgument(u.scheme + ":// needs " + how);
}

void check_rank(const Url& u, int rank, int world_size) {
  if (world_size < 1) {
    throw InvalidArgument("rendezvous('" + u.text + "'): world_size " + std::to_string(world_size) +
                          " is invalid; it must be at least 1");
  }
  if (rank < 0 || rank >= world_size) {
    throw InvalidArgument("rendezvous('" + u.text + "'): rank " + std::to_string(rank) +
                          " is outside [0, " + std::to_string(world_size) + ") for world_size " +
                          std::to_string(world_size) + "; ranks are numbered 0..world_size-1");
  }
}

std::optional<int64_t> env_int(const char* name) {
  if (!config::is_set(name)) return std::nullopt;
  return config::get_int(name);  // ConfigError (an InvalidArgument) names a malformed value
}

// Connects to (or, on rank 0, starts) the TCPStore at host:port.
// `source` says where the address came from ("MASTER_ADDR and MASTER_PORT", "the URL
// tcp://..."), for the error a user gets when the store cannot be reached in time.
RendezvousResult tcp_store_result(const std::string& host, uint16_t port, int rank, int world_size,
                                  std::chrono::milliseconds timeout, const std::string& source) {
  bool agent = config::get_bool("TPCOMM_USE_AGENT_STORE");
  bool is_master = !agent && rank == 0;
  TPLOG(INFO, INIT) << "rendezvous: rank " << rank << "/" << world_size << " "
                    << (is_master ? "hosts" : "joins") << " the TCPStore at " << host << ":" << port
                    << (agent ? " (served by the launcher)" : "");
  RendezvousResult r;
  try {
    r.store = std::make_shared<TCPStore>(host, port, world_size, is_master, timeout,
                                         /*wait_for_workers=*/true);
  } catch (const TimeoutError& e) {
    throw TimeoutError("rank " + std::to_string(rank) + " could not join the job's store: " +
                       e.what() + " (the store's address comes from " + source +
                       "; the deadline is the init timeout, TPCOMM_TIMEOUT)");
  }
  r.rank = rank;
  r.world_size = world_size;
  return r;
}

RendezvousResult env_handler(const std::string& url, int rank, int world_size,
                             std::chrono::milliseconds timeout) {
  Url u = rdzv::parse_url(url);
  if (!u.host.empty() || u.port || (!u.path.empty() && u.path != "/")) {
    throw InvalidArgument("malformed rendezvous URL '" + url +
                          "': env:// takes no host, port or path; the store address comes from "
                          "MASTER_ADDR and MASTER_PORT (use tcp://host:port to give it inline)");
  }
  check_query_names(u);
  if (!config::is_set("MASTER_ADDR") || config::get_string("MASTER_ADDR").empty())
    throw InvalidArgument("env:// needs MASTER_ADDR: set it, or start the job with tprun");
  if (!config::is_set("MASTER_PORT"))
    throw InvalidArgument("env:// needs MASTER_PORT: set it, or start the job with tprun");
  std::string host = config::get_string("MASTER_ADDR");
  auto port = static_cast<uint16_t>(config::get_int("MASTER_PORT"));
  int ws = pick(u, "world_size", world_size, env_int("WORLD_SIZE"),
                "WORLD_SIZE: set it, pass world_size, or start the job with tprun");
  int r = pick(u, "rank", rank, env_int("RANK"),
               "RANK: set it, pass rank, or start the job with tprun");
  check_rank(u, r, ws);
  return tcp_store_result(host, port, r, ws, timeout, "MASTER_ADDR and MASTER_PORT");
}

RendezvousResult tcp_handler(const std::string& url, int rank, int world_size,
                             std::chrono::milliseconds timeout) {
  Url u = rdzv::parse_url(url);
  if (u.host.empty() || !u.port) {
    throw InvalidArgument("malformed rendezvous URL '" + url +
                          "': tcp:// needs host:port, e.g. tcp://10.0.0.1:29500 or "
                          "tcp://[fe80::1]:29500");
  }
  if (!u.path.empty() && u.path != "/")
    throw InvalidArgument("malformed rendezvous URL '" + url + "': tcp:// takes no path ('" +
                          u.path + "')");
  check_query_names(u);
  int ws = pick(u, "world_size", world_size, std::nullopt,
                "world_size: add ?world_size=N to the URL, or pass world_size");
  int r = pick(u, "rank", rank, std::nullopt, "rank: add ?rank=R to the URL, or pass rank");
  check_rank(u, r, ws);
  return tcp_store_result(u.host, *u.port, r, ws, timeout, "the URL '" + url + "'");
}

RendezvousResult file_handler(const std::string& url, int rank, int world_size,
                              std::chrono::milliseconds timeout) {
  Url u = rdzv::parse_url(url);
  if (!u.host.empty() && u.host != "localhost") {
    throw InvalidArgument("malformed rendezvous URL '" + url +
                          "': file:// takes an absolute path after three slashes, e.g. "
                          "file:///shared/job/store (not host '" +
                          u.host + "')");
  }
  if (u.path.empty() || u.path == "/")
    throw InvalidArgument("malformed rendezvous URL '" + url +
                          "': file:// needs the path of the store file, e.g. "
                          "file:///shared/job/store");
  check_query_names(u);
  int ws = pick(u, "world_size", world_size, std::nullopt,
                "world_size: add ?world_size=N to the URL, or pass world_size");
  int r = pick(u, "rank", rank, std::nullopt, "rank: add ?rank=R to the URL, or pass rank");
  check_rank(u, r, ws);
  RendezvousResult res;
  auto store = std::make_shared<FileStore>(u.path, ws);
  store->set_timeout(timeout);
  res.store = std::move(store);
  res.rank = r;
  res.world_size = ws;
  return res;
}

}  // namespace

void register_rendezvous_handler(const std::string& scheme, RendezvousHandler handler) {
  std::string s = rdzv::url_scheme(scheme + "://");
  if (!handler)
    throw InvalidArgument("register_rendezvous_handler('" + scheme + "'): the handler is empty");
  HandlerRegistry& reg = handlers();
  std::lock_guard<std::mutex> lk(reg.mu);
  reg.handlers[s] = std::move(handler);
}

RendezvousResult rendezvous(const std::string& url, int rank, int world_size,
                            std::chrono::milliseconds timeout) {
  if (rank < -1) {
    throw InvalidArgument("rendezvous('" + url + "'): rank " + std::to_string(rank) +
                          " is invalid; pass a rank >= 0, or -1 to take it from the URL or "
                          "the environment");
  }
  if (world_size == 0 || world_size < -1) {
    throw InvalidArgument("rendezvous('" + url + "'): world_size " + std::to_string(world_size) +
                          " is invalid; pass a world size >= 1, or -1 to take it from the URL "
                          "or the environment");
  }
  std::string scheme = rdzv::url_scheme(url);
  RendezvousHandler handler;
  {
    HandlerRegistry& reg = handlers();
    std::lock_guard<std::mutex> lk(reg.mu);
    auto it = reg.handlers.find(scheme);
    if (it == reg.handlers.end()) {
      std::string known;
      for (const auto& [name, h] : reg.handlers) known += (known.empty() ? "" : ", ") + name;
      throw InvalidArgument("rendezvous('" + url + "'): unknown scheme '" + scheme +
                            "'; registered schemes: " + known +
                            " (register_rendezvous_handler adds one)");
    }
    handler = it->second;
  }
  RendezvousResult r = handler(url, rank, world_size, timeout);
  if (!r.store || r.world_size < 1 || r.rank < 0 || r.rank >= r.world_size) {
    throw InvalidArgument("rendezvous('" + url + "'): the handler of scheme '" + scheme +
                          "' returned " + (r.store ? "" : "no store, ") + "rank " +
                          std::to_string(r.rank) + " and world_size " +
                          std::to_string(r.world_size) +
                          "; a handler must return a store and 0 <= rank < world_size");
  }
  return r;
}

}  // namespace tpcomm
