// The tcp transport (docs/transport.md): a listening socket, one endpoint per peer with a
// socket for messages and TPCOMM_SOCKET_NSOCKS for puts, put emulated by a header plus a
// stream write that the target reads straight into the registered destination. All sockets
// are non-blocking and driven by progress() through one epoll set, which is also the
// transport's wait_fd().
#pragma once

#include <poll.h>

#include <array>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "net/socket.h"
#include "tpcomm/transport/transport.hpp"
#include "transports/tcp/wire.h"

namespace tpcomm::tcp {

struct Options {
  int nsocks = 0;  ///< put sockets per peer (plus one for messages); 0: put_sockets_for()
  std::string ifname;
  std::string addr;  ///< explicit local address (TPCOMM_SOCKET_ADDR)
  int family = 0;    ///< AF_UNSPEC, AF_INET or AF_INET6
  size_t bufsize = 0;
  std::string congestion = "auto";  ///< TPCOMM_SOCKET_CONGESTION: auto, system or a name
  size_t max_message = 256 * 1024;
  size_t frame = 1 << 20;  ///< largest put fragment per write
  /// progress() rounds per poll() of every socket while messages come on one (1: every round).
  int poll_every = 8;
  /// Reads the TPCOMM_SOCKET_* variables.
  static Options from_env();
};

/// Put sockets of a connection from `local` (the listener's address) to `peer`: `nsocks`
/// (TPCOMM_SOCKET_NSOCKS) when positive; 0 (auto) gives 1 within this host (same_host) and 2
/// to other hosts.
int put_sockets_for(int nsocks, const net::SockAddr& local, const net::SockAddr& peer);

class TcpTransport;
class TcpEndpoint;

/// A local put in flight: done when every fragment has been written.
struct PutTx {
  uint64_t cookie = 0;
  uint32_t frames_left = 0;
  bool failed = false;
};

/// One queued frame.
struct SendItem {
  uint8_t hdr[kFrameSize];
  std::vector<uint8_t> owned;     ///< a message: the whole frame, copied
  const uint8_t* data = nullptr;  ///< a put fragment: the user's bytes (after hdr)
  size_t len = 0;
  size_t done = 0;  ///< bytes of the frame already written
  std::shared_ptr<PutTx> put;
  size_t total() const { return owned.empty() ? kFrameSize + len : owned.size(); }
};

/// Receive buffer of a put socket: frame headers only.
inline constexpr size_t kBulkRbuf = 4 * kFrameSize;

struct Socket {
  /// AwaitAuth: the accepting side challenged the peer (shared secret) and waits for its
  /// response.
  enum class State { AwaitAck, AwaitHello, AwaitAuth, Open, Closed };
  net::Fd fd;
  State state = State::Closed;
  TcpEndpoint* ep = nullptr;
  bool initiated = false;
  /// A put socket (index >= 1: messages never travel on it, a message there is refused): read
  /// frame headers alone, so that a fragment's bytes go straight from the kernel into the
  /// destination, none through rbuf (kBulkRbuf bytes).
  bool bulk = false;
  std::string where;        ///< peer address, for messages
  std::vector<uint8_t> hs;  ///< handshake bytes received so far
  // shared-secret handshake (TPCOMM_AUTH_SECRET; the end of device.cc)
  Hello hello;  ///< accepting side: the hello, attached once authenticated
  std::array<uint8_t, 16> mine{}, theirs{};  ///< this side's and the peer's nonce
  bool challenged = false;                   ///< connecting side: answered the peer's challenge
  // receive
  std::vector<uint8_t> rbuf;
  size_t rhead = 0, rtail = 0;
  Frame cur;                  ///< put fragment being read directly
  uint8_t* direct = nullptr;  ///< where it goes (nullptr: discard)
  uint64_t direct_left = 0;
  bool bye = false;
  // send
  std::deque<SendItem> msgs, puts;
  bool active = false, active_put = false;  ///< front of msgs/puts is partly written
  size_t queued_bytes = 0;
  bool want_out = false;  ///< EPOLLOUT registered
};

/// Marks a socket of index `index`: a put socket (index >= 1) gets a receive buffer for frame
/// headers alone (the 512 KiB one new_socket() made is released).
inline void mark_index(Socket& s, size_t index) {
  s.bulk = index > 0;
  if (s.bulk) s.rbuf = std::vector<uint8_t>(kBulkRbuf);
}

/// Queues a control frame (no payload: Bye, Switch) behind whatever the socket has queued.
inline void queue_control(Socket& s, FrameKind kind) {
  SendItem item;
  Frame f;
  f.kind = kind;
  encode_frame(f, item.hdr);
  s.queued_bytes += kFrameSize;
  s.msgs.push_back(std::move(item));
}

/// Bytes of a put from the peer still to come, by the peer's put id.
struct PutRx {
  uint64_t remaining = 0;
  uint32_t imm = 0;
  bool dropped = false;
};

class TcpEndpoint : public transport::Endpoint {
 public:
  TcpEndpoint(TcpTransport* dev, int peer) : dev_(dev), peer_(peer) {}
  int peer() const override { return peer_; }
  bool ready() const override { return ready_; }
  [[nodiscard]] transport::PostStatus send(std::span<const iovec> iov) override;
  [[nodiscard]] transport::PostStatus put(const transport::MemoryRegion& src, size_t src_offset,
                                          const transport::RemoteKey& dst, size_t dst_offset,
                                          size_t length, uint32_t imm, uint64_t cookie) override;

  /// A post on a closed connection: queues the failure, answers PeerFailed.
  transport::PostStatus closed();

  TcpTransport* dev_;
  int peer_;
  bool ready_ = false;
  bool failed_ = false;
  bool active_ = false;          ///< we connected (tx = our sockets)
  bool bye_ = false;             ///< the peer said goodbye on one of its sockets
  bool tx_closed_ = false;       ///< a socket we send on was closed by the peer
  uint16_t expected_ = 0;        ///< passive: sockets the peer announced
  std::vector<Socket*> tx;       ///< the sockets we send on, by index
  std::vector<Socket*> sockets;  ///< every socket of this peer (tx and receive-only)
  // One socket for the messages of a pair. When both ranks connected, the higher one moves its
  // messages onto the lower one's first socket (kAckShared), so that each message's
  // acknowledgement rides on the next one coming back instead of being a packet of its own:
  // 5.4 us for an 8-byte exchange on one loopback socket against 7.0 on a socket per
  // direction, between two raw processes. A Switch frame on its own first socket
  // marks the move; the lower rank reads nothing on its own sockets until it has read that.
  Socket* msg_tx_ = nullptr;   ///< where messages go when not tx[0] (the peer's socket)
  Socket* share_on_ = nullptr; ///< the peer's first socket, answered kAckShared: moving there
  uint64_t peer_seen_ = 0;     ///< which of the peer's sockets were accepted (before the move)
  uint16_t peer_nsocks_ = 0;   ///< how many it announced
  bool hold_ = false;          ///< connector: frames on our sockets wait for the Switch
  bool switch_seen_ = false;   ///< connector: the peer's Switch was read
  /// The socket messages are written to.
  Socket& msg_socket() const { return msg_tx_ ? *msg_tx_ : *tx[0]; }
  std::unordered_map<uint64_t, PutRx> rx_puts;
  uint64_t next_put_id_ = 1;
  size_t rr_ = 0;
};

/// A registered region: the key's blob is its id in the device's table.
struct RegionTable {
  struct Entry {
    uint8_t* addr;
    size_t length;
  };
  std::unordered_map<uint64_t, Entry> regions;
  uint64_t next_id = 1;
};

class TcpTransport : public transport::Transport {
 public:
  TcpTransport(const transport::TransportContext& ctx, const Options& opt);
  ~TcpTransport() override;

  const char* name() const override { return "tcp"; }
  transport::Capabilities capabilities() const override;
  std::vector<uint8_t> address() const override;
  transport::Endpoint& connect(int peer, std::span<const uint8_t> peer_address,
                               std::chrono::steady_clock::time_point deadline) override;
  std::unique_ptr<transport::MemoryRegion> register_memory(void* addr, size_t length,
                                                           tpcomm::Device device) override;
  int progress(transport::EventSink& sink) override;
  int wait_fd() const override { return epoll_.get(); }

  // Used by the endpoints and the socket I/O.
  const Options& opt() const { return opt_; }
  const transport::TransportContext& ctx() const { return ctx_; }
  /// Writes what the socket's queue allows; false on a broken connection (failure queued).
  bool flush(Socket& s);
  void want_out(Socket& s, bool on);
  /// Queues the endpoint's failure; reported (after draining its other sockets) by the
  /// next progress().
  void fail_later(TcpEndpoint& ep, const std::string& reason);
  void put_written(PutTx& tx);
  RegionTable& regions() { return *regions_; }

 private:
  struct Event {
    enum class Kind { PutDone, PeerError } kind;
    uint64_t cookie = 0;
    bool ok = true;
    int peer = -1;
    std::string reason;
  };

  /// Sockets up to which progress() polls with poll() rather than epoll_wait().
  static constexpr size_t kPollLimit = 64;

  /// Checks every socket (poll(), or epoll_wait() past kPollLimit) and handles the ready ones.
  int poll_all(transport::EventSink& sink);

  int accept_new();
  int handle_ready(Socket* s, bool in, bool out, transport::EventSink& sink);
  int handshake(Socket& s, transport::EventSink& sink);
  int read_frames(Socket& s, transport::EventSink& sink);
  void attach_accepted(Socket& s, const Hello& h, const std::string& note = "");
  // Shared secret (end of device.cc). Accepting side: challenge a peer whose hello passed; check
  // its response (the bytes in s.hs). Connecting side: answer a challenge; check the acceptor's
  // proof in its final ack. Each returns false after refusing or failing the connection.
  void auth_challenge(Socket& s);
  void auth_check_response(Socket& s);
  bool auth_answer(Socket& s, const Ack& a, transport::EventSink& sink);
  bool auth_check_ack(Socket& s, const Ack& a, transport::EventSink& sink);
  void refuse(Socket& s, const std::string& reason);
  void fail_now(TcpEndpoint& ep, const std::string& reason, transport::EventSink& sink);
  void close_socket(Socket& s);
  Socket* new_socket(int fd, Socket::State state, const std::string& where);
  void shutdown_all();
  int deliver_events(transport::EventSink& sink);

  transport::TransportContext ctx_;
  Options opt_;
  net::Fd listener_;
  net::Fd epoll_;
  std::string listen_addr_;  ///< "ip:port" published to peers
  std::string secret_;       ///< TPCOMM_AUTH_SECRET ("" : no challenge)
  std::string local_ip_;     ///< bind address of outgoing sockets (explicit address only)
  net::SockAddr listen_sa_;  ///< the listener's address (same-host connections share its IP)
  /// Sets the congestion control on a socket to (or from) `peer` (congestion.h); `accepted`:
  /// it came through the listener, whose choice it inherited.
  void choose_congestion(int fd, const net::SockAddr& peer, bool accepted);
  /// Sets `want` on `fd`; the first refusal is logged, naming `whose` socket it was.
  void apply_congestion(int fd, const std::string& want, const std::string& whose);
  bool congestion_warned_ = false;
  std::unordered_map<int, std::unique_ptr<TcpEndpoint>> endpoints_;
  std::unordered_map<Socket*, std::unique_ptr<Socket>> sockets_;
  std::vector<std::unique_ptr<Socket>> graveyard_;
  std::vector<Event> events_;
  std::vector<std::pair<TcpEndpoint*, std::string>> failing_;
  std::shared_ptr<RegionTable> regions_;
  std::vector<uint8_t> scratch_;  ///< sink for dropped put bytes
  std::vector<pollfd> pfds_;      ///< progress()'s poll set (listener first), and its sockets
  std::vector<Socket*> psocks_;
  std::vector<std::pair<Socket*, short>> ready_;  ///< poll_all()'s ready set (kept: no malloc)
  bool pfds_dirty_ = true;
  // The hot socket (opt_.poll_every > 1): the last one a message arrived on. While it is the
  // only busy socket, progress() reads it directly (one recv() that mostly answers EAGAIN) and
  // polls every socket only every poll_every-th round: one system call per spinning round
  // instead of two (poll() then recv()) at an arrival, and a cheaper one while nothing comes.
  Socket* hot_ = nullptr;
  int hot_rounds_ = 0;      ///< direct reads left before the next poll_all()
  int want_out_count_ = 0;  ///< sockets with queued bytes (EPOLLOUT/POLLOUT wanted)
};

}  // namespace tpcomm::tcp
