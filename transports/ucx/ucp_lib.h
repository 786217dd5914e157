// The UCP entry points the ucx transport uses, resolved from libucp at run time (dlopen), so
// that a build with UCX still runs on a machine without it: the transport then reports itself
// unavailable with the reason and the engine falls back.
#pragma once

#include <ucp/api/ucp.h>

#include <string>

namespace tpcomm::ucx {

// X(name): every UCP/UCS function called through the table.
#define TPCOMM_UCP_FUNCS(X)     \
  X(ucp_config_read)            \
  X(ucp_config_modify)          \
  X(ucp_config_release)         \
  X(ucp_config_print)           \
  X(ucp_init_version)           \
  X(ucp_cleanup)                \
  X(ucp_get_version_string)     \
  X(ucp_worker_create)          \
  X(ucp_worker_destroy)         \
  X(ucp_worker_get_address)     \
  X(ucp_worker_release_address) \
  X(ucp_worker_progress)        \
  X(ucp_worker_get_efd)         \
  X(ucp_worker_arm)             \
  X(ucp_ep_create)              \
  X(ucp_ep_close_nbx)           \
  X(ucp_ep_flush_nbx)           \
  X(ucp_ep_print_info)          \
  X(ucp_ep_rkey_unpack)         \
  X(ucp_rkey_destroy)           \
  X(ucp_rkey_pack)              \
  X(ucp_rkey_buffer_release)    \
  X(ucp_mem_map)                \
  X(ucp_mem_unmap)              \
  X(ucp_mem_query)              \
  X(ucp_rkey_ptr)               \
  X(ucp_tag_send_nbx)           \
  X(ucp_tag_send_sync_nbx)      \
  X(ucp_tag_recv_nbx)           \
  X(ucp_put_nbx)                \
  X(ucp_am_send_nbx)            \
  X(ucp_am_recv_data_nbx)       \
  X(ucp_am_data_release)        \
  X(ucp_worker_set_am_recv_handler) \
  X(ucp_worker_query)           \
  X(ucp_request_check_status)   \
  X(ucp_request_cancel)         \
  X(ucp_request_free)           \
  X(ucs_status_string)

/// Function pointers into libucp (and libucs through it).
struct UcpLib {
#define TPCOMM_UCP_MEMBER(f) decltype(&::f) f = nullptr;
  TPCOMM_UCP_FUNCS(TPCOMM_UCP_MEMBER)
#undef TPCOMM_UCP_MEMBER
};

/// Opens `library` (e.g. "libucp.so.0") once per name and resolves the table. Throws
/// NotSupportedError naming the library and the loader's reason when it is absent or too old.
const UcpLib& load_ucp(const std::string& library);

/// ucs_status_string through the table, with the numeric status.
std::string status_text(const UcpLib& u, ucs_status_t s);

}  // namespace tpcomm::ucx
