// One point-to-point operation (a send or a receive) as the engine tracks it. Shared by the
// engine (while in flight) and the Work handed to the user.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "tpcomm/transport/memory.hpp"
#include "tpcomm/types.hpp"

namespace tpcomm::p2p {

struct Link;

struct Op {
  enum class Kind : uint8_t { Send, Recv };
  /// Where the operation is, for timeout messages.
  enum class Stage : uint8_t {
    Queued,    ///< send: waiting for a credit or transport resources
    Posted,    ///< recv: waiting for a matching message; send: RTS sent, waiting for CTS
    Transfer,  ///< rendezvous data moving (put in flight or awaited)
    Done,
  };

  Kind kind = Kind::Send;
  Stage stage = Stage::Queued;
  uint64_t group = 0;
  std::string group_name;
  /// The group whose name group_name holds (kept by reset(): a recycled op posted to the same
  /// group again skips copying the name).
  uint64_t named_group = 0;
  bool named = false;
  int peer = -1;  ///< global rank; kAnySource for an any-source receive
  int tag = 0;
  Tensor tensor;
  uint64_t seq = 0;
  uint32_t id = 0;  ///< engine id: matcher receive id, rendezvous ids, put cookies

  // Result: written under the engine lock before `done` is set (release).
  std::atomic<bool> done{false};
  std::exception_ptr error;
  int source = -1;        ///< recv: the sender's global rank
  uint64_t received = 0;  ///< recv: bytes received

  // Rendezvous state (engine lock).
  std::unique_ptr<transport::MemoryRegion> mr;
  uint32_t chunks_left = 0;
  Link* link = nullptr;     ///< recv: link of the matched sender; send: link to the peer
  bool range_held = false;  ///< recv: its buffer is in the engine's active-range set
  /// The data moves as tagged data (Capabilities::tagged_data) under data_id: sent with the
  /// RTS, received by the transport's own matching; no CTS unless refused.
  bool tagged = false;
  uint32_t data_id = 0;

  /// "send to rank 3 (group 'default_pg', tag 0, float32[1024] on cpu)".
  std::string describe() const;

  /// Back to a fresh op (a recycled Work reuses its Op: pg/p2p_work.cc). Only when nothing
  /// refers to the op any more.
  void reset() {
    kind = Kind::Send;
    stage = Stage::Queued;
    group = 0;
    peer = -1;
    tag = 0;
    tensor = Tensor{};
    seq = 0;
    id = 0;
    done.store(false, std::memory_order_relaxed);
    error = nullptr;
    source = -1;
    received = 0;
    mr.reset();
    chunks_left = 0;
    link = nullptr;
    range_held = false;
    tagged = false;
    data_id = 0;
  }
};

}  // namespace tpcomm::p2p
