// TcpEndpoint: messages go whole on one socket that carries nothing else, so that they stay
// in order and never wait behind a put (the endpoint's first, or the peer's first when both
// connected: device.h, msg_tx_); puts are cut into fragments spread over its other sockets
// and written from the source memory without a copy.
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "tpcomm/error.hpp"
#include "transports/tcp/device.h"

namespace tpcomm::tcp {
namespace {

// Largest amount queued per socket before send() answers NoResource.
constexpr size_t kMaxQueued = 64 << 20;

}  // namespace

transport::PostStatus TcpEndpoint::closed() {
  if (!failed_)
    dev_->fail_later(*this, "rank " + std::to_string(peer_) +
                                (bye_ ? " closed the connection (it destroyed its process group "
                                        "or exited)"
                                      : " closed a connection without saying goodbye"));
  return transport::PostStatus::PeerFailed;
}

transport::PostStatus TcpEndpoint::send(std::span<const iovec> iov) {
  if (failed_ || tx_closed_) return closed();
  if (!ready_) return transport::PostStatus::NoResource;
  size_t total = 0;
  for (const iovec& v : iov) total += v.iov_len;
  if (total > dev_->opt().max_message)
    throw InvalidArgument("tcp send: message of " + std::to_string(total) +
                          " bytes exceeds max_message " + std::to_string(dev_->opt().max_message));
  Socket& s = msg_socket();
  Frame f;
  f.kind = FrameKind::Msg;
  f.len = total;
  uint8_t hdr[kFrameSize];
  encode_frame(f, hdr);
  size_t written = 0;
  if (!s.active && s.msgs.empty() && s.puts.empty()) {
    iovec v[9];
    if (iov.size() > 8) throw InvalidArgument("tcp send: more than 8 iovec entries");
    v[0] = {hdr, kFrameSize};
    for (size_t i = 0; i < iov.size(); ++i) v[i + 1] = iov[i];
    msghdr mh{};
    mh.msg_iov = v;
    mh.msg_iovlen = iov.size() + 1;
    ssize_t n = ::sendmsg(s.fd.get(), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        dev_->fail_later(*this, "sending to rank " + std::to_string(peer_) + " (" + s.where +
                                    ") failed: " + std::strerror(errno));
        return transport::PostStatus::PeerFailed;
      }
      n = 0;
    }
    written = static_cast<size_t>(n);
    if (written == kFrameSize + total) return transport::PostStatus::Ok;
  }
  if (s.queued_bytes > kMaxQueued) return transport::PostStatus::NoResource;
  // Keep the rest (buffered-copy semantics: the caller may reuse its buffers now).
  SendItem item;
  item.owned.resize(kFrameSize + total);
  std::memcpy(item.owned.data(), hdr, kFrameSize);
  size_t at = kFrameSize;
  for (const iovec& v : iov) {
    std::memcpy(item.owned.data() + at, v.iov_base, v.iov_len);
    at += v.iov_len;
  }
  item.done = written;
  s.queued_bytes += item.total();
  if (written > 0) {
    // Partly on the wire: it must be the next thing written on this socket.
    s.msgs.push_front(std::move(item));
    s.active = true;
    s.active_put = false;
  } else {
    s.msgs.push_back(std::move(item));
  }
  dev_->want_out(s, true);
  return transport::PostStatus::Ok;
}

transport::PostStatus TcpEndpoint::put(const transport::MemoryRegion& src, size_t src_offset,
                                       const transport::RemoteKey& dst, size_t dst_offset,
                                       size_t length, uint32_t imm, uint64_t cookie) {
  if (failed_ || tx_closed_) return closed();
  if (!ready_) return transport::PostStatus::NoResource;
  if (src_offset > src.length() || length > src.length() - src_offset)
    throw InvalidArgument("tcp put: source range [" + std::to_string(src_offset) + ", +" +
                          std::to_string(length) + ") is outside the " +
                          std::to_string(src.length()) + "-byte region");
  if (dst_offset > dst.length || length > dst.length - dst_offset)
    throw InvalidArgument("tcp put: destination range [" + std::to_string(dst_offset) + ", +" +
                          std::to_string(length) + ") is outside the " +
                          std::to_string(dst.length) + "-byte remote region");
  if (dst.blob_size != sizeof(uint64_t))
    throw InvalidArgument("tcp put: the remote key is not a tcp key");
  uint64_t region;
  std::memcpy(&region, dst.blob_data, sizeof region);
  // Spread over every socket but the first (messages: device.h, msg_tx_; a peer that made
  // only one, like the tests' hand-made ones, gets everything on it), in fragments of at most
  // `frame` bytes.
  const size_t first = tx.size() > 1 ? 1 : 0;
  const size_t nsocks = tx.size() - first;
  size_t per = std::max<size_t>(64 * 1024, (length + nsocks - 1) / nsocks);
  per = std::min(per, dev_->opt().frame);
  size_t frames = length == 0 ? 1 : (length + per - 1) / per;
  auto ptx = std::make_shared<PutTx>();
  ptx->cookie = cookie;
  ptx->frames_left = static_cast<uint32_t>(frames);
  uint64_t id = next_put_id_++;
  const uint8_t* base = static_cast<const uint8_t*>(src.addr()) + src_offset;
  for (size_t i = 0; i < frames; ++i) {
    size_t off = i * per;
    size_t len = std::min(per, length - off);
    SendItem item;
    Frame f;
    f.kind = FrameKind::Put;
    f.imm = imm;
    f.len = len;
    f.region = region;
    f.offset = dst_offset + off;
    f.total = length;
    f.put_id = id;
    encode_frame(f, item.hdr);
    item.data = base + off;
    item.len = len;
    item.put = ptx;
    Socket& s = *tx[first + rr_++ % nsocks];
    s.queued_bytes += item.total();
    s.puts.push_back(std::move(item));
  }
  for (Socket* s : tx)
    if (!s->puts.empty() && !dev_->flush(*s)) return transport::PostStatus::Ok;  // fails later
  return transport::PostStatus::Ok;
}

}  // namespace tpcomm::tcp
