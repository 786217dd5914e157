// Shared helpers of the tcp transport tests: a recording event sink, transports made with
// settings from the environment, pumping progress until a condition holds, and a fake peer (a
// plain socket that speaks the handshake and then writes whatever frames a test wants).
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/deadline.h"
#include "net/socket.h"
#include "tpcomm/error.hpp"
#include "tpcomm/transport/transport.hpp"
#include "transports/tcp/wire.h"

namespace tpcomm::transport::tcp_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

/// Records every event.
struct Sink : EventSink {
  std::vector<std::vector<uint8_t>> messages;
  std::vector<int> message_peers;
  std::vector<uint32_t> arrived;
  std::vector<std::pair<uint64_t, bool>> done;
  std::vector<std::pair<int, std::string>> errors;

  void on_message(int peer, std::span<const uint8_t> data) override {
    messages.emplace_back(data.begin(), data.end());
    message_peers.push_back(peer);
  }
  void on_put_arrived(int /*peer*/, uint32_t imm) override { arrived.push_back(imm); }
  void on_put_done(uint64_t cookie, bool ok) override { done.emplace_back(cookie, ok); }
  void on_peer_error(int peer, const std::string& reason) override {
    errors.emplace_back(peer, reason);
  }
};

inline TransportContext make_ctx(int rank, int world, const std::string& job = "tcp-test") {
  TransportContext ctx;
  ctx.rank = rank;
  ctx.world_size = world;
  ctx.job_id = job;
  ctx.host_id = "test-host";
  ctx.timeout = std::chrono::milliseconds(30000);
  return ctx;
}

inline std::unique_ptr<Transport> make_tcp(int rank, int world) {
  return create_transport("tcp", make_ctx(rank, world));
}

/// Progresses every (transport, sink) pair until pred() or the timeout; true when pred held.
inline bool pump(const std::vector<std::pair<Transport*, Sink*>>& parts,
                 const std::function<bool()>& pred, std::chrono::milliseconds timeout = 30s) {
  auto end = Clock::now() + timeout;
  while (!pred()) {
    if (Clock::now() > end) return false;
    for (auto& [t, s] : parts) t->progress(*s);
  }
  return true;
}

/// Connects a (rank ra) to b (rank rb), the way the engine does (one side connects, the
/// other uses the connection it accepted), and waits until both endpoints can send.
inline std::pair<Endpoint*, Endpoint*> connect_pair(Transport& a, Sink& sa, int ra, Transport& b,
                                                    Sink& sb, int rb) {
  auto deadline = Clock::now() + 30s;
  Endpoint& ab = a.connect(rb, b.address(), deadline);
  EXPECT_TRUE(pump({{&a, &sa}, {&b, &sb}}, [&] { return ab.ready(); })) << "no connection";
  Endpoint& ba = b.connect(ra, a.address(), deadline);
  EXPECT_TRUE(pump({{&a, &sa}, {&b, &sb}}, [&] { return ba.ready(); })) << "no connection back";
  return {&ab, &ba};
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

/// Deterministic test bytes.
inline uint8_t pattern(uint64_t seed, size_t i) {
  return static_cast<uint8_t>((seed * 131 + i * 7 + (i >> 8) * 13) & 0xff);
}

/// A hand-made peer: one socket to a transport's address that says hello as rank `src` and
/// then writes raw bytes.
struct FakePeer {
  net::Fd fd;

  /// Connects and completes the handshake; the transport under test must be progressed
  /// meanwhile (pump_fn is called while waiting for its answer).
  bool connect(const std::vector<uint8_t>& address, int src, int dst, int world,
               const std::function<void()>& pump_fn, const std::string& job = "tcp-test") {
    auto [host, port] = net::split_host_port(std::string(address.begin(), address.end()));
    fd = net::connect_to(host, port, Deadline::after(10s));
    tcp::Hello h;
    h.nsocks = 1;
    h.index = 0;
    h.src = src;
    h.dst = dst;
    h.world_size = world;
    h.job_id = job;
    uint8_t buf[tcp::kHelloFixed + tcp::kMaxJobId];
    size_t n = tcp::encode_hello(h, buf);
    if (!write(buf, n)) return false;
    // The answer: kAckFixed bytes and its reason (empty when accepted).
    std::vector<uint8_t> ack;
    auto end = Clock::now() + 10s;
    while (Clock::now() < end) {
      pump_fn();
      uint8_t b[256];
      ssize_t r = ::recv(fd.get(), b, sizeof b, MSG_DONTWAIT);
      if (r > 0) ack.insert(ack.end(), b, b + r);
      if (r == 0) return false;
      tcp::Ack a;
      std::string err;
      size_t need =
          ack.empty() ? tcp::kAckFixed : tcp::decode_ack(ack.data(), ack.size(), &a, &err);
      if (!ack.empty() && need != 0 && need <= ack.size()) return a.status == 0;
      if (!ack.empty() && need == 0) return false;
    }
    return false;
  }
  bool write(const void* p, size_t n) {
    try {
      net::write_all(fd.get(), p, n, Deadline::after(10s), "the transport under test");
      return true;
    } catch (const Error&) {
      return false;
    }
  }
  bool frame(const tcp::Frame& f, const void* payload = nullptr, size_t n = 0) {
    uint8_t hdr[tcp::kFrameSize];
    tcp::encode_frame(f, hdr);
    return write(hdr, sizeof hdr) && (n == 0 || write(payload, n));
  }
  bool message(const std::vector<uint8_t>& body) {
    tcp::Frame f;
    f.kind = tcp::FrameKind::Msg;
    f.len = body.size();
    return frame(f, body.data(), body.size());
  }
};

}  // namespace tpcomm::transport::tcp_test
