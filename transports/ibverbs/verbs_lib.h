// The libibverbs entry points the ibverbs transport uses, resolved at run time (dlopen), so one
// build runs on hosts with and without rdma-core: where the library or a device is missing the
// transport reports itself unavailable with a one-line reason and the engine falls back.
// TPCOMM_IBVERBS_LIB names another library (the test device, tests/ibverbs_device/).
//
// The data-path verbs (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) are
// static inline in verbs.h and call through ibv_context::ops, so they are used from the header
// against the loaded context and need no symbol here.
#pragma once

#include <infiniband/verbs.h>

#include <string>
#include <vector>

namespace tpcomm::ibv {

// X(name): every exported function called through the table; member `name` has the type of
// ::ibv_<name>. (Members drop the ibv_ prefix because several ibv_* names are function-like
// macros in verbs.h, e.g. ibv_reg_mr and ibv_query_port.)
#define TPCOMM_IBV_FUNCS(X) \
  X(get_device_list)        \
  X(free_device_list)       \
  X(get_device_name)        \
  X(open_device)            \
  X(close_device)           \
  X(query_device)           \
  X(query_port)             \
  X(query_gid)              \
  X(alloc_pd)               \
  X(dealloc_pd)             \
  X(reg_mr)                 \
  X(dereg_mr)               \
  X(create_comp_channel)    \
  X(destroy_comp_channel)   \
  X(create_cq)              \
  X(destroy_cq)             \
  X(get_cq_event)           \
  X(ack_cq_events)          \
  X(create_qp)              \
  X(modify_qp)              \
  X(query_qp)               \
  X(destroy_qp)             \
  X(wc_status_str)

/// Function pointers into libibverbs (or a library with the same entry points).
struct VerbsLib {
  std::string path;  ///< the name it was opened by
#define TPCOMM_IBV_MEMBER(f) decltype(&::ibv_##f) f = nullptr;
  TPCOMM_IBV_FUNCS(TPCOMM_IBV_MEMBER)
#undef TPCOMM_IBV_MEMBER
  /// _ibv_query_gid_ex (rdma-core 32+): the GID type; nullptr on older libraries.
  decltype(&::_ibv_query_gid_ex) query_gid_ex = nullptr;
  /// ibv_fork_init (TPCOMM_IB_FORK_SAFE); optional so that minimal libraries load.
  decltype(&::ibv_fork_init) fork_init = nullptr;
};

/// Opens `library` once per name and resolves the table. Throws NotSupportedError with a
/// one-line reason naming the library (absent, or lacking an entry point).
const VerbsLib& load_verbs(const std::string& library);

/// ibv_query_port as verbs.h's inline does it: through the extended context when the
/// provider has one, else the exported compat entry. Returns 0 or an errno value.
int query_port(const VerbsLib& lib, ibv_context* ctx, uint8_t port, ibv_port_attr* attr);

/// One usable port of one device, as listed for selection and tpinfo.
struct PortInfo {
  std::string device;  ///< ibv_get_device_name, e.g. mlx5_0
  int port = 0;        ///< 1-based
  ibv_port_attr attr{};
  bool roce() const { return attr.link_layer == IBV_LINK_LAYER_ETHERNET; }
};

/// Every port of every device, active or not. Throws NotSupportedError when the library lists
/// no device ("no RDMA device"), naming the library.
std::vector<PortInfo> list_ports(const VerbsLib& lib);

/// "ACTIVE", "DOWN", ... for messages.
const char* port_state_name(ibv_port_state s);

/// Link rate in Gbit/s from ibv_port_attr active_width and active_speed (0 when unknown).
double port_gbps(const ibv_port_attr& a);

/// Bytes of an ibv_mtu (IBV_MTU_1024 -> 1024; 0 when invalid).
int mtu_bytes(int mtu);

}  // namespace tpcomm::ibv
