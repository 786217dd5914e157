// dlopen of libucp: see ucp_lib.h.
#include "transports/ucx/ucp_lib.h"

#include <dlfcn.h>

#include <map>
#include <memory>
#include <mutex>

#include "core/dynlib.h"
#include "tpcomm/error.hpp"

namespace tpcomm::ucx {

const UcpLib& load_ucp(const std::string& library) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<UcpLib>> loaded;
  std::lock_guard<std::mutex> lk(mu);
  auto it = loaded.find(library);
  if (it != loaded.end()) return *it->second;
  // Never closed: UCX keeps global state (memory hooks, async threads) for the process.
  void* h = dynlib::open(library, "ucx transport: cannot load UCX library",
                         "install UCX, e.g. libucx0, or set TPCOMM_UCX_LIBRARY");
  auto lib = std::make_unique<UcpLib>();
#define TPCOMM_UCP_RESOLVE(f)                                          \
  lib->f = reinterpret_cast<decltype(&::f)>(dlsym(h, #f));             \
  if (lib->f == nullptr)                                               \
    throw NotSupportedError("ucx transport: UCX library '" + library + \
                            "' lacks " #f " (tpcomm needs UCX 1.13 or newer)");
  TPCOMM_UCP_FUNCS(TPCOMM_UCP_RESOLVE)
#undef TPCOMM_UCP_RESOLVE
  return *loaded.emplace(library, std::move(lib)).first->second;
}

std::string status_text(const UcpLib& u, ucs_status_t s) {
  return std::string(u.ucs_status_string(s)) + " (status " + std::to_string(static_cast<int>(s)) +
         ")";
}

}  // namespace tpcomm::ucx
