// Shared-secret helpers (auth.h).
#include "core/auth.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/config.h"
#include "tpcomm/error.hpp"

namespace tpcomm::auth {

std::string job_secret() {
  std::string s = config::get_string("TPCOMM_AUTH_SECRET");
  if (!s.empty()) return s;
  std::string path = config::get_string("TPCOMM_AUTH_SECRET_FILE");
  if (path.empty()) return "";
  std::ifstream f(path);
  if (!f)
    throw ConfigError("TPCOMM_AUTH_SECRET_FILE='" + path + "' cannot be read: " +
                      std::strerror(errno) + "; point it at a file holding the job's secret");
  std::getline(f, s);
  if (s.empty())
    throw ConfigError("TPCOMM_AUTH_SECRET_FILE='" + path +
                      "' is empty; its first line must hold the job's secret");
  return s;
}

Nonce make_nonce() {
  Nonce n{};
  size_t got = 0;
  while (got < n.size()) {
    ssize_t r = getrandom(n.data() + got, n.size() - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(std::string("getrandom failed: ") + std::strerror(errno));
    }
    got += static_cast<size_t>(r);
  }
  return n;
}

crypto::Digest proof(const std::string& secret, std::string_view role, std::string_view job,
                     std::span<const uint8_t> first, std::span<const uint8_t> second) {
  std::string msg;
  msg.append(role);
  msg.push_back('\0');
  msg.append(job);
  msg.push_back('\0');
  msg.append(reinterpret_cast<const char*>(first.data()), first.size());
  msg.append(reinterpret_cast<const char*>(second.data()), second.size());
  return crypto::hmac_sha256(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(secret.data()), secret.size()),
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(msg.data()), msg.size()));
}

std::string hex(std::span<const uint8_t> bytes) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

bool unhex(std::string_view text, std::span<uint8_t> out) {
  if (text.size() != 2 * out.size()) return false;
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = val(text[2 * i]), lo = val(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

}  // namespace tpcomm::auth
