// Shared helpers of the transport tests (tests/shm, tests/tcp): a recording event sink, a
// transport context, pumping progress until a condition holds, and setting a variable.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "tpcomm/transport/transport.hpp"

namespace tpcomm::transport::test_util {

/// Records every event; optional hooks run inside the callbacks.
struct Sink : EventSink {
  std::vector<std::vector<uint8_t>> messages;
  std::vector<int> message_peers;
  std::vector<uint32_t> arrived;
  std::vector<std::pair<uint64_t, bool>> done;
  std::vector<std::pair<int, std::string>> errors;
  std::function<void(uint32_t)> on_arrived;
  std::function<void(std::span<const uint8_t>)> on_msg;

  void on_message(int peer, std::span<const uint8_t> data) override {
    if (on_msg) on_msg(data);
    messages.emplace_back(data.begin(), data.end());
    message_peers.push_back(peer);
  }
  void on_put_arrived(int /*peer*/, uint32_t imm) override {
    if (on_arrived) on_arrived(imm);
    arrived.push_back(imm);
  }
  void on_put_done(uint64_t cookie, bool ok) override { done.emplace_back(cookie, ok); }
  void on_peer_error(int peer, const std::string& reason) override {
    errors.emplace_back(peer, reason);
  }
};

/// The context of rank `rank` of `world` in job `job` on one test host (30 s timeout).
inline TransportContext make_ctx(int rank, int world, const std::string& job) {
  TransportContext ctx;
  ctx.rank = rank;
  ctx.world_size = world;
  ctx.job_id = job;
  ctx.host_id = "test-host";
  ctx.timeout = std::chrono::milliseconds(30000);
  return ctx;
}

/// Progresses every (transport, sink) pair until pred() or the timeout; true when pred held.
inline bool pump(const std::vector<std::pair<Transport*, Sink*>>& parts,
                 const std::function<bool()>& pred,
                 std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    for (auto& [t, s] : parts) t->progress(*s);
  }
  return true;
}

/// Sets (or unsets, when value is null) a variable and reloads the registry.
inline void set_env(const char* name, const char* value) {
  if (value) {
    ::setenv(name, value, 1);
  } else {
    ::unsetenv(name);
  }
  config::reload();
}

}  // namespace tpcomm::transport::test_util
