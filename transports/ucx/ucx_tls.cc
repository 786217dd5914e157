// UCX_TLS lists as UCX resolved them: what they may name (transports/ucx/ucx_transport.cc
// decides native put and Capabilities::progress_is_syscall from them).
#include <initializer_list>
#include <string>
#include <vector>

#include "transports/ucx/ucx_internal.h"

namespace tpcomm::ucx {
namespace {

// The entries of a UCX_TLS list ("tcp,\\posix" -> tcp, posix; empty entries dropped).
std::vector<std::string> tls_entries(const std::string& tls) {
  std::vector<std::string> out;
  for (size_t i = 0; i <= tls.size();) {
    size_t j = tls.find(',', i);
    if (j == std::string::npos) j = tls.size();
    std::string t = tls.substr(i, j - i);
    i = j + 1;
    if (!t.empty() && t[0] == '\\') t.erase(0, 1);
    if (!t.empty()) out.push_back(std::move(t));
  }
  return out;
}

// True when every entry of a plain (not "^...") UCX_TLS list is one of `names`; false for an
// empty list, "all" and "^..." lists (they may name anything).
bool tls_only(const std::string& tls, std::initializer_list<const char*> names) {
  if (tls.empty() || tls[0] == '^') return false;
  std::vector<std::string> entries = tls_entries(tls);
  if (entries.empty()) return false;
  for (const std::string& t : entries) {
    bool listed = false;
    for (const char* n : names) listed = listed || t == n;
    if (!listed) return false;
  }
  return true;
}

}  // namespace

// True when UCX_TLS (as UCX resolved it) may name an RDMA transport, whose RMA tpcomm uses
// (ucp_put_nbx): anything but tcp and the shared-memory ones ("all" and "^..." lists may).
bool tls_may_be_native(const std::string& config_text, std::string* tls_out) {
  auto pos = config_text.find("UCX_TLS=");
  if (pos == std::string::npos) return true;
  auto end = config_text.find('\n', pos);
  std::string tls = config_text.substr(pos + 8, end == std::string::npos ? end : end - pos - 8);
  *tls_out = tls;
  return !tls_only(tls, {"tcp", "sockcm", "self", "shm", "sm", "mm", "posix", "sysv", "cma",
                         "knem", "xpmem"});
}

// True when UCX_TLS names socket transports only (tcp, its connection manager, self), so that
// every ucp_worker_progress is a system call (Capabilities::progress_is_syscall). "all", a
// "^..." list or any shared-memory or RDMA entry: false.
bool tls_is_sockets_only(const std::string& tls) {
  return tls_only(tls, {"tcp", "sockcm", "self"});
}

}  // namespace tpcomm::ucx
