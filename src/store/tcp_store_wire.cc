// Encoder and validating decoder of the TCPStore wire protocol (format in tcp_store_wire.h).
#include "store/tcp_store_wire.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace tpcomm::store_wire {

namespace {

template <typename T>
T to_le(T v) {
  if constexpr (std::endian::native == std::endian::big) {
    if constexpr (sizeof(T) == 2)
      return static_cast<T>(__builtin_bswap16(static_cast<uint16_t>(v)));
    if constexpr (sizeof(T) == 4)
      return static_cast<T>(__builtin_bswap32(static_cast<uint32_t>(v)));
    if constexpr (sizeof(T) == 8)
      return static_cast<T>(__builtin_bswap64(static_cast<uint64_t>(v)));
  }
  return v;
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return to_le(v);
}

// Bounds-checked reader over one payload.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool u16(uint16_t* v) { return fixed(v); }
  bool u32(uint32_t* v) { return fixed(v); }
  bool u64(uint64_t* v) { return fixed(v); }
  bool i64(int64_t* v) { return fixed(v); }
  bool bytes(std::span<const uint8_t>* out) {
    uint32_t len;
    if (!u32(&len) || len > n_ - pos_) return false;
    *out = std::span<const uint8_t>(p_ + pos_, len);
    pos_ += len;
    return true;
  }
  bool str(std::string_view* out) {
    std::span<const uint8_t> b;
    if (!bytes(&b)) return false;
    *out = std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
    return true;
  }
  size_t left() const { return n_ - pos_; }
  bool done() const { return pos_ == n_; }

 private:
  template <typename T>
  bool fixed(T* v) {
    if (n_ - pos_ < sizeof(T)) return false;
    *v = load<T>(p_ + pos_);
    pos_ += sizeof(T);
    return true;
  }
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

bool fail(DecodeError* err, ErrorCode code, std::string msg) {
  if (err) {
    err->code = code;
    err->message = std::move(msg);
  }
  return false;
}

bool key_ok(std::string_view key, const Limits& limits, const char* op, DecodeError* err) {
  if (key.size() > limits.max_key) {
    return fail(err, ErrorCode::kTooLarge,
                std::string(op) + ": key of " + std::to_string(key.size()) +
                    " bytes exceeds the server's limit TPCOMM_STORE_MAX_KEY=" +
                    std::to_string(limits.max_key) + " bytes (use shorter keys or raise it)");
  }
  return true;
}

bool value_ok(std::span<const uint8_t> v, std::string_view key, const Limits& limits,
              const char* op, DecodeError* err) {
  if (v.size() > limits.max_value) {
    return fail(err, ErrorCode::kTooLarge,
                std::string(op) + "('" + std::string(key.substr(0, 64)) + "'): value of " +
                    std::to_string(v.size()) +
                    " bytes exceeds the server's limit TPCOMM_STORE_MAX_VALUE=" +
                    std::to_string(limits.max_value) + " bytes (raise it on the server)");
  }
  return true;
}

// Reads `u32 n, n x str key` (the key list of check/wait/multi_get).
bool key_list(Reader& r, const Limits& limits, const char* op, Request* out, DecodeError* err) {
  uint32_t n;
  if (!r.u32(&n)) return fail(err, ErrorCode::kBadFrame, std::string(op) + ": missing key count");
  // Each key takes at least 4 bytes: a count beyond that is a lie; never reserve it.
  if (n > r.left() / 4)
    return fail(err, ErrorCode::kBadFrame,
                std::string(op) + ": key count " + std::to_string(n) + " exceeds the payload");
  out->keys.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    std::string_view k;
    if (!r.str(&k)) return fail(err, ErrorCode::kBadFrame, std::string(op) + ": truncated key");
    if (!key_ok(k, limits, op, err)) return false;
    out->keys.push_back(k);
  }
  return true;
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::kHello:
      return "hello";
    case Op::kSet:
      return "set";
    case Op::kGet:
      return "get";
    case Op::kAdd:
      return "add";
    case Op::kCompareSet:
      return "compare_set";
    case Op::kDelete:
      return "delete_key";
    case Op::kCheck:
      return "check";
    case Op::kWait:
      return "wait";
    case Op::kNumKeys:
      return "num_keys";
    case Op::kAppend:
      return "append";
    case Op::kMultiGet:
      return "multi_get";
    case Op::kMultiSet:
      return "multi_set";
    case Op::kCancel:
      return "cancel";
    case Op::kHelloOk:
      return "hello_ok";
    case Op::kOk:
      return "ok";
    case Op::kValue:
      return "value";
    case Op::kInt:
      return "int";
    case Op::kValues:
      return "values";
    case Op::kKeys:
      return "keys";
    case Op::kError:
      return "error";
  }
  return "unknown";
}

bool is_request_op(uint8_t op) { return op >= 1 && op <= 13; }
bool is_reply_op(uint8_t op) { return op >= 64 && op <= 70; }

HeaderStatus decode_header(const uint8_t* p, size_t n, const Limits& limits, Header* h) {
  if (n == 0) return HeaderStatus::kNeedMore;
  if (n < 4) {
    // A prefix that already differs from the magic is foreign: say so without waiting.
    uint32_t m = to_le(kMagic);
    if (std::memcmp(p, &m, n) != 0) return HeaderStatus::kBadMagic;
    return HeaderStatus::kNeedMore;
  }
  if (load<uint32_t>(p) != kMagic) return HeaderStatus::kBadMagic;
  if (n < kHeaderSize) return HeaderStatus::kNeedMore;
  h->version = p[4];
  h->op = p[5];
  h->flags = load<uint16_t>(p + 6);
  h->id = load<uint32_t>(p + 8);
  h->length = load<uint64_t>(p + 12);
  if (h->version != kVersion) return HeaderStatus::kBadVersion;
  if (h->length > limits.max_payload()) return HeaderStatus::kTooLarge;
  return HeaderStatus::kOk;
}

bool decode_request(const Header& h, const uint8_t* payload, const Limits& limits, Request* out,
                    DecodeError* err) {
  out->op = h.op;
  out->flags = h.flags;
  out->id = h.id;
  out->key = {};
  out->value = {};
  out->desired = {};
  out->delta = 0;
  out->target = 0;
  out->keys.clear();
  out->values.clear();
  if (!is_request_op(h.op))
    return fail(err, ErrorCode::kBadFrame, "unknown request op " + std::to_string(h.op));
  const Op op = static_cast<Op>(h.op);
  const char* name = op_name(op);
  const bool may_skip_reply = op == Op::kSet || op == Op::kAppend || op == Op::kMultiSet;
  if ((h.flags & ~kFlagNoReply) != 0 || (h.flags != 0 && !may_skip_reply))
    return fail(err, ErrorCode::kBadFrame,
                std::string(name) + ": unknown flags " + std::to_string(h.flags));
  Reader r(payload, h.length);
  auto truncated = [&] {
    return fail(err, ErrorCode::kBadFrame, std::string(name) + ": truncated payload");
  };
  switch (op) {
    case Op::kHello:
      if (!r.str(&out->job_id) || !r.str(&out->client) || !r.u32(&out->hello_flags))
        return truncated();
      if (out->job_id.size() > 1024 || out->client.size() > 1024)
        return fail(err, ErrorCode::kBadFrame, "hello: job id or client name over 1024 bytes");
      break;
    case Op::kSet:
    case Op::kAppend:
      if (!r.str(&out->key) || !r.bytes(&out->value)) return truncated();
      if (!key_ok(out->key, limits, name, err) ||
          !value_ok(out->value, out->key, limits, name, err))
        return false;
      break;
    case Op::kGet:
    case Op::kDelete:
      if (!r.str(&out->key)) return truncated();
      if (!key_ok(out->key, limits, name, err)) return false;
      break;
    case Op::kAdd:
      if (!r.str(&out->key) || !r.i64(&out->delta)) return truncated();
      if (!key_ok(out->key, limits, name, err)) return false;
      break;
    case Op::kCompareSet:
      if (!r.str(&out->key) || !r.bytes(&out->value) || !r.bytes(&out->desired)) return truncated();
      if (!key_ok(out->key, limits, name, err) ||
          !value_ok(out->value, out->key, limits, name, err) ||
          !value_ok(out->desired, out->key, limits, name, err))
        return false;
      break;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      if (!key_list(r, limits, name, out, err)) return false;
      break;
    case Op::kNumKeys:
      break;
    case Op::kMultiSet: {
      uint32_t n;
      if (!r.u32(&n)) return truncated();
      if (n > r.left() / 8)
        return fail(err, ErrorCode::kBadFrame,
                    "multi_set: pair count " + std::to_string(n) + " exceeds the payload");
      out->keys.reserve(n);
      out->values.reserve(n);
      for (uint32_t i = 0; i < n; ++i) {
        std::string_view k;
        std::span<const uint8_t> v;
        if (!r.str(&k) || !r.bytes(&v)) return truncated();
        if (!key_ok(k, limits, name, err) || !value_ok(v, k, limits, name, err)) return false;
        out->keys.push_back(k);
        out->values.push_back(v);
      }
      break;
    }
    case Op::kCancel:
      if (!r.u32(&out->target)) return truncated();
      break;
    default:
      return fail(err, ErrorCode::kBadFrame, "unknown request op " + std::to_string(h.op));
  }
  if (!r.done())
    return fail(
        err, ErrorCode::kBadFrame,
        std::string(name) + ": " + std::to_string(r.left()) + " stray bytes after the fields");
  return true;
}

bool decode_reply(const Header& h, const uint8_t* payload, Reply* out, std::string* err) {
  out->op = h.op;
  out->id = h.id;
  out->values.clear();
  out->keys.clear();
  auto bad = [&](const std::string& m) {
    if (err) *err = m;
    return false;
  };
  if (!is_reply_op(h.op)) return bad("unknown reply op " + std::to_string(h.op));
  if (h.flags != 0) return bad("unknown reply flags " + std::to_string(h.flags));
  Reader r(payload, h.length);
  const Op op = static_cast<Op>(h.op);
  switch (op) {
    case Op::kHelloOk:
      if (!r.str(&out->server) || !r.u64(&out->max_key) || !r.u64(&out->max_value) ||
          !r.str(&out->local))
        return bad("truncated hello reply");
      break;
    case Op::kOk:
      break;
    case Op::kValue:
      if (!r.bytes(&out->value)) return bad("truncated value reply");
      break;
    case Op::kInt:
      if (!r.i64(&out->integer)) return bad("truncated integer reply");
      break;
    case Op::kValues:
    case Op::kKeys: {
      uint32_t n;
      if (!r.u32(&n)) return bad("truncated list reply");
      if (n > r.left() / 4) return bad("list reply count " + std::to_string(n) + " too large");
      for (uint32_t i = 0; i < n; ++i) {
        std::span<const uint8_t> v;
        if (!r.bytes(&v)) return bad("truncated list reply");
        if (op == Op::kValues) {
          out->values.push_back(v);
        } else {
          out->keys.emplace_back(reinterpret_cast<const char*>(v.data()), v.size());
        }
      }
      break;
    }
    case Op::kError: {
      uint16_t code;
      if (!r.u16(&code) || !r.str(&out->message)) return bad("truncated error reply");
      out->code = static_cast<ErrorCode>(code);
      break;
    }
    default:
      return bad("unknown reply op " + std::to_string(h.op));
  }
  if (!r.done()) return bad(std::to_string(r.left()) + " stray bytes after the reply fields");
  return true;
}

size_t decode_stream(const uint8_t* data, size_t size, const Limits& limits, bool as_server) {
  size_t pos = 0, frames = 0;
  Request req;
  Reply rep;
  DecodeError derr;
  std::string err;
  while (pos < size) {
    Header h;
    if (decode_header(data + pos, size - pos, limits, &h) != HeaderStatus::kOk) break;
    if (h.length > size - pos - kHeaderSize) break;
    const uint8_t* payload = data + pos + kHeaderSize;
    bool ok = as_server ? decode_request(h, payload, limits, &req, &derr)
                        : decode_reply(h, payload, &rep, &err);
    if (!ok) break;
    pos += kHeaderSize + h.length;
    ++frames;
  }
  return frames;
}

void Writer::begin(Op op, uint32_t id, uint16_t flags) {
  start_ = buf_->size();
  buf_->resize(start_ + kHeaderSize);
  uint8_t* p = buf_->data() + start_;
  uint32_t m = to_le(kMagic);
  std::memcpy(p, &m, 4);
  p[4] = kVersion;
  p[5] = static_cast<uint8_t>(op);
  uint16_t f = to_le(flags);
  std::memcpy(p + 6, &f, 2);
  uint32_t i = to_le(id);
  std::memcpy(p + 8, &i, 4);
}

void Writer::put(const void* p, size_t n) {
  size_t at = buf_->size();
  buf_->resize(at + n);
  std::memcpy(buf_->data() + at, p, n);
  if constexpr (std::endian::native == std::endian::big) {
    std::reverse(buf_->data() + at, buf_->data() + at + n);
  }
}

void Writer::str(const void* p, size_t n) {
  u32(static_cast<uint32_t>(n));
  size_t at = buf_->size();
  buf_->resize(at + n);
  if (n) std::memcpy(buf_->data() + at, p, n);
}

void Writer::end() {
  uint64_t len = to_le(static_cast<uint64_t>(buf_->size() - start_ - kHeaderSize));
  std::memcpy(buf_->data() + start_ + 12, &len, 8);
}

void encode_error(std::vector<uint8_t>* buf, uint32_t id, ErrorCode code,
                  std::string_view message) {
  Writer w(buf);
  w.begin(Op::kError, id);
  w.u16(static_cast<uint16_t>(code));
  w.str(message);
  w.end();
}

std::string printable_prefix(const uint8_t* p, size_t n, size_t max) {
  std::string out;
  for (size_t i = 0; i < n && i < max; ++i) {
    char c = static_cast<char>(p[i]);
    if (c == '\r')
      out += "\\r";
    else if (c == '\n')
      out += "\\n";
    else if (p[i] >= 0x20 && p[i] < 0x7f)
      out += c;
    else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[p[i] >> 4];
      out += hex[p[i] & 15];
    }
  }
  if (n > max) out += "...";
  return out;
}

}  // namespace tpcomm::store_wire
