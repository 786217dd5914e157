// dlopen of libibverbs: see verbs_lib.h.
#include "transports/ibverbs/verbs_lib.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "core/dynlib.h"
#include "tpcomm/error.hpp"

namespace tpcomm::ibv {

const VerbsLib& load_verbs(const std::string& library) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<VerbsLib>> loaded;
  std::lock_guard<std::mutex> lk(mu);
  auto it = loaded.find(library);
  if (it != loaded.end()) return *it->second;
  // Never closed: providers keep process-wide state (fork handling, device lists).
  void* h = dynlib::open(library, "ibverbs transport: cannot load",
                         "install rdma-core's libibverbs1, or set TPCOMM_IBVERBS_LIB");
  auto lib = std::make_unique<VerbsLib>();
  lib->path = library;
#define TPCOMM_IBV_RESOLVE(f)                                           \
  lib->f = reinterpret_cast<decltype(&::ibv_##f)>(dlsym(h, "ibv_" #f)); \
  if (lib->f == nullptr)                                                \
    throw NotSupportedError("ibverbs transport: '" + library +          \
                            "' lacks ibv_" #f " (not a libibverbs, or older than rdma-core 17)");
  TPCOMM_IBV_FUNCS(TPCOMM_IBV_RESOLVE)
#undef TPCOMM_IBV_RESOLVE
  lib->query_gid_ex =
      reinterpret_cast<decltype(&::_ibv_query_gid_ex)>(dlsym(h, "_ibv_query_gid_ex"));
  lib->fork_init = reinterpret_cast<decltype(&::ibv_fork_init)>(dlsym(h, "ibv_fork_init"));
  return *loaded.emplace(library, std::move(lib)).first->second;
}

int query_port(const VerbsLib& lib, ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
  std::memset(attr, 0, sizeof(*attr));
  verbs_context* v = verbs_get_ctx(ctx);
  if (v != nullptr && v->sz >= sizeof(*v) - offsetof(verbs_context, query_port) &&
      v->query_port != nullptr)
    return v->query_port(ctx, port, attr, sizeof(*attr));
  return lib.query_port(ctx, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}

std::vector<PortInfo> list_ports(const VerbsLib& lib) {
  int n = 0;
  ibv_device** list = lib.get_device_list(&n);
  if (list == nullptr || n <= 0) {
    if (list != nullptr) lib.free_device_list(list);
    throw NotSupportedError("ibverbs transport: no RDMA device (library '" + lib.path +
                            "' lists none; check 'ibv_devices' and the kernel modules)");
  }
  std::vector<PortInfo> out;
  for (int i = 0; i < n; ++i) {
    ibv_context* ctx = lib.open_device(list[i]);
    if (ctx == nullptr) continue;
    ibv_device_attr da{};
    if (lib.query_device(ctx, &da) == 0) {
      for (int p = 1; p <= da.phys_port_cnt; ++p) {
        PortInfo pi;
        pi.device = lib.get_device_name(list[i]);
        pi.port = p;
        if (query_port(lib, ctx, static_cast<uint8_t>(p), &pi.attr) == 0) out.push_back(pi);
      }
    }
    lib.close_device(ctx);
  }
  lib.free_device_list(list);
  return out;
}

const char* port_state_name(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP:
      return "NOP";
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
  }
  return "UNKNOWN";
}

double port_gbps(const ibv_port_attr& a) {
  int lanes = 0;
  switch (a.active_width) {
    case 1:
      lanes = 1;
      break;
    case 2:
      lanes = 4;
      break;
    case 4:
      lanes = 8;
      break;
    case 8:
      lanes = 12;
      break;
    case 16:
      lanes = 2;
      break;
    default:
      return 0;
  }
  double lane = 0;  // effective Gbit/s per lane (ibv_query_port(3) active_speed)
  switch (a.active_speed) {
    case 1:
      lane = 2.0;
      break;  // SDR 2.5 Gb/s, 8b/10b
    case 2:
      lane = 4.0;
      break;  // DDR
    case 4:
      lane = 8.0;
      break;  // QDR
    case 8:
      lane = 10.0;
      break;  // FDR10
    case 16:
      lane = 13.64;
      break;  // FDR
    case 32:
      lane = 25.0;
      break;  // EDR
    case 64:
      lane = 50.0;
      break;  // HDR
    case 128:
      lane = 100.0;
      break;  // NDR
    default:
      return 0;
  }
  return lanes * lane;
}

int mtu_bytes(int mtu) {
  switch (mtu) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
    default:
      return 0;
  }
}

}  // namespace tpcomm::ibv
