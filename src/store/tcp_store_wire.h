// The TCPStore wire protocol: frame layout, encoder and a pure, validating decoder shared by
// the server, the client and the fuzzer (tests/fuzz/store_wire_fuzz.cc).
//
// A connection carries frames. Each frame is a 20-byte header and a payload; all integers
// are little-endian.
//
//   offset  size  field
//   0       4     magic    0x54535054 (the bytes 'T' 'P' 'S' 'T')
//   4       1     version  kVersion (2)
//   5       1     op       Op: requests are 1..63, replies 64..127
//   6       2     flags    requests: bit 0 = kFlagNoReply (set, append, multi_set: the server
//                          replies only when the request fails); every other bit must be 0
//   8       4     id       request id picked by the client (increasing); a reply carries the
//                          id of the request it answers, so a late reply to a request the
//                          client gave up on is recognised and dropped
//   12      8     length   payload bytes after the header; at most Limits::max_payload()
//
// Payload fields are `str` (u32 length + bytes: keys, values, text), `u32`, `u64`, `i64`.
// A request's payload must be consumed exactly by its fields.
//
//   HELLO       str job_id, str client ("host:pid"), u32 hello flags (kHelloSelf: the
//               master's own client, not counted as a worker; kHelloAskLocal: only asking
//               for the server's local socket, see below). Must be the first frame.
//   SET         str key, str value          APPEND      str key, str value
//   GET         str key                     ADD         str key, i64 delta
//   COMPARE_SET str key, str expected, str desired
//   DELETE      str key                     NUM_KEYS    (empty)
//   CHECK, WAIT, MULTI_GET                  u32 n, n x str key
//   MULTI_SET   u32 n, n x (str key, str value)
//   CANCEL      u32 id of a parked GET/WAIT/MULTI_GET of this connection to drop
//
//   HELLO_OK    str server ("host:pid"), u64 max_key, u64 max_value, str local socket
//               (abstract Unix socket name, "" when none or not asked)
//   OK          (empty): set, append, multi_set, wait
//   VALUE       str value: get, compare_set
//   INT         i64: add (new value), delete (1/0), check (1/0), num_keys
//   VALUES      u32 n, n x str value: multi_get
//   KEYS        u32 n, n x str key: cancel (the keys that were still missing)
//   ERROR       u16 ErrorCode, str message
//
// A client on the server's host may move to a Unix-domain socket (much cheaper than loopback
// TCP): its first HELLO carries kHelloAskLocal, and the HELLO_OK names the server's abstract
// socket without completing the handshake. The client connects there and says HELLO again
// (without the flag), or, when it cannot (another host or network namespace), says it again
// on the TCP connection.
//
// GET, WAIT and MULTI_GET are parked by the server until their keys exist. The server
// refuses a first frame that is not a HELLO of this version and job (ERROR, then close;
// an HTTP request gets an HTTP 400). A frame longer than the limit gets an ERROR naming the
// limit; its payload is skipped (or the connection closed when the length is absurd).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tpcomm::store_wire {

inline constexpr uint32_t kMagic = 0x54535054;
inline constexpr uint8_t kVersion = 2;
inline constexpr size_t kHeaderSize = 20;
inline constexpr uint16_t kFlagNoReply = 1;
inline constexpr uint32_t kHelloSelf = 1;
inline constexpr uint32_t kHelloAskLocal = 2;
/// Lengths above this are garbage, not an honest request over the limit: the server closes
/// the connection instead of skipping the payload.
inline constexpr uint64_t kAbsurdLength = uint64_t{1} << 40;

/// Operation codes (one byte on the wire).
enum class Op : uint8_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kAdd = 4,
  kCompareSet = 5,
  kDelete = 6,
  kCheck = 7,
  kWait = 8,
  kNumKeys = 9,
  kAppend = 10,
  kMultiGet = 11,
  kMultiSet = 12,
  kCancel = 13,
  kHelloOk = 64,
  kOk = 65,
  kValue = 66,
  kInt = 67,
  kValues = 68,
  kKeys = 69,
  kError = 70,
};

/// Name of an op for messages ("get", "multi_set").
const char* op_name(Op op);
bool is_request_op(uint8_t op);
bool is_reply_op(uint8_t op);

/// Why the server refused a request (first field of an ERROR payload).
enum class ErrorCode : uint16_t {
  kBadFrame = 1,        ///< malformed frame: the connection is closed after the reply
  kTooLarge = 2,        ///< key, value or frame over TPCOMM_STORE_MAX_KEY/_VALUE
  kJobMismatch = 3,     ///< HELLO of another job
  kVersion = 4,         ///< HELLO of another protocol version
  kTooManyClients = 5,  ///< TPCOMM_STORE_MAX_CLIENTS reached
  kNotCounter = 6,      ///< add() on a value that is not an integer
  kShuttingDown = 7,    ///< the server is stopping
  /// The server has a shared secret (TPCOMM_AUTH_SECRET): the message ends with
  /// "[challenge <32 hex>]"; the client says HELLO again, its client field ending with
  /// " [response <32 hex nonce><64 hex HMAC proof>]"; HELLO_OK's server field then ends with
  /// " [proof <64 hex>]", the server's proof. The connection stays open.
  kAuthRequired = 8,
  kAuthFailed = 9,  ///< wrong proof: the connection is closed after the reply
};

/// Size limits of keys, values and frames.
struct Limits {
  uint64_t max_key = 4096;
  uint64_t max_value = 256ull << 20;
  /// Largest payload: one maximal value with its key and field lengths.
  uint64_t max_payload() const { return max_value + max_key + 64; }
};

/// A decoded frame header.
struct Header {
  uint8_t version = 0;
  uint8_t op = 0;
  uint16_t flags = 0;
  uint32_t id = 0;
  uint64_t length = 0;
};

/// Result of decode_header.
enum class HeaderStatus {
  kNeedMore,    ///< fewer than kHeaderSize bytes
  kOk,          ///< valid; the payload may still be incomplete
  kBadMagic,    ///< not a tpcomm store frame (another program)
  kBadVersion,  ///< a tpcomm frame of another protocol version
  kTooLarge,    ///< length over limits.max_payload() (compare with kAbsurdLength)
};

/// Decodes and checks the header at p[0..n). Pure; never reads past n.
HeaderStatus decode_header(const uint8_t* p, size_t n, const Limits& limits, Header* h);

/// A decoded request; the views point into the decoded buffer.
struct Request {
  uint8_t op = 0;
  uint16_t flags = 0;
  uint32_t id = 0;
  std::string_view key;
  std::span<const uint8_t> value;                // set/append value, compare_set expected
  std::span<const uint8_t> desired;              // compare_set
  int64_t delta = 0;                             // add
  uint32_t target = 0;                           // cancel
  std::vector<std::string_view> keys;            // check/wait/multi_get/multi_set
  std::vector<std::span<const uint8_t>> values;  // multi_set
  std::string_view job_id, client;               // hello
  uint32_t hello_flags = 0;
};

/// Why decoding failed.
struct DecodeError {
  ErrorCode code = ErrorCode::kBadFrame;
  std::string message;
};

/// Decodes the payload of a request frame (header already checked). Checks that the op is a
/// request, the flags are known, every length fits in the payload and the limits, and the
/// payload is consumed exactly. Pure; reuses out's vectors.
bool decode_request(const Header& h, const uint8_t* payload, const Limits& limits, Request* out,
                    DecodeError* err);

/// A decoded reply; the views point into the decoded buffer.
struct Reply {
  uint8_t op = 0;
  uint32_t id = 0;
  std::span<const uint8_t> value;                // VALUE
  int64_t integer = 0;                           // INT
  std::vector<std::span<const uint8_t>> values;  // VALUES
  std::vector<std::string_view> keys;            // KEYS
  ErrorCode code = ErrorCode::kBadFrame;         // ERROR
  std::string_view message;                      // ERROR
  std::string_view server;                       // HELLO_OK
  uint64_t max_key = 0, max_value = 0;           // HELLO_OK
  std::string_view local;                        // HELLO_OK
};

/// Decodes the payload of a reply frame. Pure; `err` says what is wrong.
bool decode_reply(const Header& h, const uint8_t* payload, Reply* out, std::string* err);

/// Decodes every frame of a byte stream as the server would (as_server) or the client.
/// Returns the number of valid frames before the first invalid or incomplete one. The
/// fuzzer's entry point; also handy in tests.
size_t decode_stream(const uint8_t* data, size_t size, const Limits& limits, bool as_server);

/// Appends frames to a byte buffer (reused across requests: no allocation once warm).
class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* buf) : buf_(buf) {}
  /// Starts a frame; end() patches its length.
  void begin(Op op, uint32_t id, uint16_t flags = 0);
  void u16(uint16_t v) { put(&v, 2); }
  void u32(uint32_t v) { put(&v, 4); }
  void u64(uint64_t v) { put(&v, 8); }
  void i64(int64_t v) { put(&v, 8); }
  void str(const void* p, size_t n);
  void str(std::string_view s) { str(s.data(), s.size()); }
  void str(std::span<const uint8_t> s) { str(s.data(), s.size()); }
  void end();

 private:
  void put(const void* p, size_t n);
  std::vector<uint8_t>* buf_;
  size_t start_ = 0;
};

/// Encodes an ERROR reply.
void encode_error(std::vector<uint8_t>* buf, uint32_t id, ErrorCode code, std::string_view message);

/// Shows up to `max` bytes as printable text ("GET / HTTP/1.1\r\n..." -> "GET / HTTP/1.1..")
/// for messages about foreign peers.
std::string printable_prefix(const uint8_t* p, size_t n, size_t max = 24);

}  // namespace tpcomm::store_wire
