// Pieces the raw-UCX benchmarks share (bench/ucx_rotate.cc, bench/ucx_ab.cc): a fatal error
// that names the program and UCX's status, sizes like "1M", and the bootstrap socket over
// which the two forked processes swap their addresses.
#pragma once

#include <ucp/api/ucp.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace ucx_bench {

/// The program's name in error messages (set by main).
inline const char* g_prog = "ucx bench";

[[noreturn]] inline void die(const std::string& what, ucs_status_t st = UCS_OK) {
  std::fprintf(stderr, "%s: %s%s%s\n", g_prog, what.c_str(), st == UCS_OK ? "" : ": ",
               st == UCS_OK ? "" : ucs_status_string(st));
  std::exit(1);
}

/// "4096", "64K", "1M", "2G" -> bytes.
inline size_t parse_size(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end && *end ? *end : 0) {
    case 'K':
    case 'k':
      v *= 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
    default:
      break;
  }
  return static_cast<size_t>(v);
}

/// Whole-buffer writes and reads over the bootstrap socket; a short one is fatal.
inline void put_all(int fd, const void* p, size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = ::write(fd, c, n);
    if (k <= 0) die("bootstrap write failed (the other process died?)");
    c += k;
    n -= static_cast<size_t>(k);
  }
}
inline void get_all(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t k = ::read(fd, c, n);
    if (k <= 0) die("bootstrap read failed (the other process died?)");
    c += k;
    n -= static_cast<size_t>(k);
  }
}

/// Sends `len` bytes (length first) and returns the other process's bytes.
inline std::vector<uint8_t> swap_blob(int fd, const void* data, size_t len) {
  uint64_t n = len;
  put_all(fd, &n, sizeof n);
  put_all(fd, data, len);
  get_all(fd, &n, sizeof n);
  std::vector<uint8_t> peer(n);
  get_all(fd, peer.data(), n);
  return peer;
}

}  // namespace ucx_bench
