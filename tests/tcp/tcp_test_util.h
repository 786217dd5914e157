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

#include "common/transport_test_util.h"
#include "core/config.h"
#include "core/deadline.h"
#include "net/socket.h"
#include "tpcomm/error.hpp"
#include "tpcomm/transport/transport.hpp"
#include "transports/tcp/wire.h"

namespace tpcomm::transport::tcp_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using test_util::pump;
using test_util::set_env;
using test_util::Sink;

inline TransportContext make_ctx(int rank, int world, const std::string& job = "tcp-test") {
  return test_util::make_ctx(rank, world, job);
}

inline std::unique_ptr<Transport> make_tcp(int rank, int world) {
  return create_transport("tcp", make_ctx(rank, world));
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

/// Deterministic test bytes.
inline uint8_t pattern(uint64_t seed, size_t i) {
  return static_cast<uint8_t>((seed * 131 + i * 7 + (i >> 8) * 13) & 0xff);
}

/// A hand-made peer: one socket to a transport's address that says hello as rank `src` and
/// then writes raw bytes.
struct FakePeer {
  net::Fd fd;

  uint16_t ack_status = 0xffff;  ///< the answer's status (0 or tcp::kAckShared: accepted)

  /// Connects and completes the handshake; the transport under test must be progressed
  /// meanwhile (pump_fn is called while waiting for its answer). `nsocks`: how many sockets
  /// the hello announces; `index`: which one this is (0: the message socket, others: puts).
  bool connect(const std::vector<uint8_t>& address, int src, int dst, int world,
               const std::function<void()>& pump_fn, const std::string& job = "tcp-test",
               uint16_t nsocks = 1, uint16_t index = 0) {
    auto [host, port] = net::split_host_port(std::string(address.begin(), address.end()));
    fd = net::connect_to(host, port, Deadline::after(10s));
    tcp::Hello h;
    h.nsocks = nsocks;
    h.index = index;
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
      if (!ack.empty() && need != 0 && need <= ack.size()) {
        ack_status = a.status;
        return a.status == 0 || a.status == tcp::kAckShared;
      }
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
