// Encoding and validation of the shm transport's address blob and control messages.
#include "transports/shm/wire.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tpcomm/error.hpp"

namespace tpcomm::transport::shm {

namespace {

class Writer {
 public:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof v);
  }
  void str(const std::string& s) {
    put(static_cast<uint16_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  template <typename T>
  bool get(T* v) {
    if (in_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool str(std::string* s, size_t max) {
    uint16_t n = 0;
    if (!get(&n) || n > max || in_.size() - pos_ < n) return false;
    s->assign(reinterpret_cast<const char*>(in_.data()) + pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

void put_info(Writer& w, const PeerInfo& i) {
  w.put(i.pid);
  w.put(i.uid);
  w.put(i.instance);
  w.put(i.probe_addr);
  w.put(i.probe_cookie);
  w.str(i.socket_name);
}

bool get_info(Reader& r, PeerInfo* i) {
  return r.get(&i->pid) && r.get(&i->uid) && r.get(&i->instance) && r.get(&i->probe_addr) &&
         r.get(&i->probe_cookie) && r.str(&i->socket_name, kMaxSocketName) &&
         !i->socket_name.empty() && i->pid != 0;
}

}  // namespace

std::vector<uint8_t> encode_address(const PeerInfo& info) {
  Writer w;
  w.put(kAddressMagic);
  w.put(kWireVersion);
  w.put(uint16_t{0});
  put_info(w, info);
  return w.take();
}

PeerInfo decode_address(std::span<const uint8_t> blob, const std::string& what) {
  Reader r(blob);
  uint32_t magic = 0;
  uint16_t version = 0, reserved = 0;
  if (!r.get(&magic) || magic != kAddressMagic) {
    throw TransportError("shm: the address of " + what + " is not an shm address (" +
                         std::to_string(blob.size()) + " bytes, bad magic)");
  }
  if (!r.get(&version) || version != kWireVersion) {
    throw TransportError("shm: the address of " + what + " has wire version " +
                         std::to_string(version) + ", this build speaks " +
                         std::to_string(kWireVersion) + "; run the same tpcomm everywhere");
  }
  PeerInfo info;
  if (!r.get(&reserved) || !get_info(r, &info) || !r.done()) {
    throw TransportError("shm: the address of " + what + " is malformed (" +
                         std::to_string(blob.size()) + " bytes)");
  }
  return info;
}

std::vector<uint8_t> encode_control(const Control& c) {
  Writer w;
  w.put(kControlMagic);
  w.put(c.version);
  w.put(static_cast<uint16_t>(c.type));
  w.put(c.src_rank);
  w.put(c.dst_rank);
  switch (c.type) {
    case ControlType::Hello:
      w.put(c.world_size);
      w.put(c.segment_bytes);
      w.put(c.ring_bytes);
      put_info(w, c.from);
      w.str(c.job_id.substr(0, kMaxJobId));
      break;
    case ControlType::Refuse:
      w.str(c.reason.substr(0, kMaxReasonText));
      break;
    case ControlType::Ack:
    case ControlType::Bye:
      break;
  }
  return w.take();
}

std::string decode_control(std::span<const uint8_t> bytes, Control* out) {
  Reader r(bytes);
  uint32_t magic = 0;
  uint16_t type = 0;
  if (!r.get(&magic) || magic != kControlMagic) {
    return "not a tpcomm shm control message (" + std::to_string(bytes.size()) +
           " bytes, bad magic)";
  }
  if (!r.get(&out->version) || !r.get(&type)) return "truncated control message header";
  if (type < 1 || type > 4) return "unknown control message type " + std::to_string(type);
  out->type = static_cast<ControlType>(type);
  if (out->version != kWireVersion) {
    return "wire version " + std::to_string(out->version) + ", this build speaks " +
           std::to_string(kWireVersion) + "; run the same tpcomm on every rank";
  }
  if (!r.get(&out->src_rank) || !r.get(&out->dst_rank)) return "truncated control message";
  switch (out->type) {
    case ControlType::Hello:
      if (!r.get(&out->world_size) || !r.get(&out->segment_bytes) || !r.get(&out->ring_bytes) ||
          !get_info(r, &out->from) || !r.str(&out->job_id, kMaxJobId)) {
        return "malformed HELLO (" + std::to_string(bytes.size()) + " bytes)";
      }
      break;
    case ControlType::Refuse:
      if (!r.str(&out->reason, kMaxReasonText)) return "malformed REFUSE";
      break;
    case ControlType::Ack:
    case ControlType::Bye:
      break;
  }
  if (!r.done()) return "control message has trailing bytes";
  return "";
}

int send_message(int sock, std::span<const uint8_t> bytes, int pass_fd) {
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
  if (pass_fd >= 0) {
    std::memset(cbuf, 0, sizeof cbuf);
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof cbuf;
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
  }
  for (;;) {
    ssize_t n = ::sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) return 0;
    if (errno == EINTR) continue;
    return errno;
  }
}

ssize_t recv_message(int sock, std::span<uint8_t> buf, int* fd) {
  *fd = -1;
  iovec iov{buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 4)];
  msg.msg_control = cbuf;
  msg.msg_controllen = sizeof cbuf;
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return -errno;
  // Keep the first descriptor; close any others a confused peer attached.
  for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
      if (*fd < 0) {
        *fd = f;
      } else {
        ::close(f);
      }
    }
  }
  if (msg.msg_flags & MSG_TRUNC) {
    // An oversized message: report it as malformed (length beyond the buffer).
    return static_cast<ssize_t>(buf.size()) + 1;
  }
  return n;
}

}  // namespace tpcomm::transport::shm
