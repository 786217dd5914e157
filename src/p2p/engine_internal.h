// Engine internals shared by engine.cc (setup, links, progress) and engine_ops.cc (the
// protocol's message handling).
#pragma once

#include <sys/epoll.h>

#include <span>
#include <string>
#include <vector>

#include "p2p/engine.h"

namespace tpcomm::p2p {

/// Adds `fd` to the epoll set `epfd` for EPOLLIN, keyed by the fd itself; false if epoll
/// cannot watch it.
inline bool epoll_watch(int epfd, int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0;
}

/// A message that arrived before its receive was posted (or out of order).
struct Incoming {
  Header h;
  Rts rts;
  Slot* slot = nullptr;
  std::vector<uint8_t> payload;   // owned copy once the bounce buffer is gone
  std::span<const uint8_t> view;  // the bytes, wherever they are
  bool heap = true;               // owned by incoming_ (false: on handle_message's stack)
};

/// Forwards a transport's events to the engine, tagged with the transport they came from.
class SinkAdapter : public transport::EventSink {
 public:
  SinkAdapter(Engine* e, Slot* s) : e_(e), s_(s) {}
  void on_message(int peer, std::span<const uint8_t> data) override;
  void on_put_arrived(int peer, uint32_t imm) override;
  void on_put_done(uint64_t cookie, bool ok) override;
  void on_peer_error(int peer, const std::string& reason) override;

 private:
  Engine* e_;
  Slot* s_;
};

struct Slot {
  Slot(Engine* e, size_t i, std::string n) : index(i), name(std::move(n)), sink(e, this) {}
  size_t index;
  std::string name;
  std::unique_ptr<transport::Transport> tr;  // null when it failed to start here
  std::string unavailable;                   // why, when tr is null
  transport::Capabilities caps;
  SinkAdapter sink;
  size_t eager_limit = 0;
  bool used = false;  ///< has links or traffic: progressed on every call, else now and then
  /// Messages and puts that arrived from each peer (index: global rank). The heartbeat
  /// (progress.cc) samples them to tell a live peer from a silent one; counting is one add.
  std::vector<uint32_t> heard;
  void note_heard(int peer) {
    if (static_cast<size_t>(peer) < heard.size()) ++heard[static_cast<size_t>(peer)];
  }
};

/// Key of Engine::links_.
inline uint64_t link_key(size_t slot, int peer) {
  return (static_cast<uint64_t>(slot) << 32) | static_cast<uint32_t>(peer);
}

/// Size of a message's payload as "float32[1024] (4096 bytes)".
std::string describe_bytes(DType t, uint64_t bytes);

}  // namespace tpcomm::p2p
