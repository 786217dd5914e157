// The exception hierarchy of the public API. Every message says what failed, where (rank,
// peer, host:port, key or variable), and what to do about it.
#pragma once

#include <stdexcept>
#include <string>

namespace tpcomm {

/// Base of every exception tpcomm throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// A deadline passed: a store wait, a Work::wait, a connection attempt.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

/// A key-value store failed: server unreachable or gone, protocol violation, refused client,
/// corrupt FileStore file, limit exceeded.
class StoreError : public Error {
 public:
  using Error::Error;
};

/// The caller passed something unusable: a rank out of range, wrong sizes, a dtype the op
/// does not support, a malformed URL.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// A TPCOMM_* (or other registry) variable has a malformed value.
class ConfigError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

/// A peer process failed, closed its connection, or sent something malformed.
class PeerError : public Error {
 public:
  using Error::Error;
};

/// A transport-level failure (socket, shared memory, verbs, UCX) not attributable to a peer.
class TransportError : public Error {
 public:
  using Error::Error;
};

/// The requested feature is not built in or not available on this machine.
class NotSupportedError : public Error {
 public:
  using Error::Error;
};

/// The operation was cancelled because its group was aborted or destroyed.
class AbortedError : public Error {
 public:
  using Error::Error;
};

/// Ranks called different collectives (or the same one with different arguments) at the
/// same sequence number.
class MismatchError : public Error {
 public:
  using Error::Error;
};

}  // namespace tpcomm
