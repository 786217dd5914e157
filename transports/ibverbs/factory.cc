// Registration of the ibverbs transport: its TPCOMM_IBVERBS_LIB / TPCOMM_IB_* variables and its
// factory. See docs/ibverbs.md.
#include <algorithm>

#include "core/config.h"
#include "tpcomm/transport/transport.hpp"
#include "transports/ibverbs/ibv_transport.h"
#include "transports/ibverbs/options.h"

namespace tpcomm::ibv {
namespace {

using config::Param;
using T = config::Type;

// clang-format off
constexpr Param kParams[] = {
  {"TPCOMM_IBVERBS_LIB", T::String, "libibverbs.so.1", "",
   "ibverbs transport: the verbs library opened at run time (tests point it at the test device "
   "libtpcomm_fake_verbs.so); when it cannot be loaded the transport is unavailable.", "ibverbs"},
  {"TPCOMM_IB_FORK_SAFE", T::Bool, "0", "",
   "ibverbs transport: call ibv_fork_init() before opening a device, so that a child created "
   "with fork() does not corrupt registered memory of the parent (as RDMAV_FORK_SAFE=1); costs "
   "an madvise per registration.", "ibverbs"},
  {"TPCOMM_IB_GID_INDEX", T::Int, "-1", "-1..255",
   "ibverbs transport: GID index used on RoCE ports; -1 chooses by type (RoCE v2 first, IPv4-"
   "mapped before IPv6), as NCCL_IB_GID_INDEX.", "ibverbs"},
  {"TPCOMM_IB_MAX_RAILS", T::Int, "0", "0..16",
   "ibverbs transport: most NICs (rails) used by a rank; 0 uses every NIC at the smallest "
   "distance from the rank's NUMA node. Large messages are striped across the rails.",
   "ibverbs"},
  {"TPCOMM_IB_QPS_PER_CONNECTION", T::Int, "1", "1..16",
   "ibverbs transport: RC queue pairs per peer; large puts are striped over them.", "ibverbs"},
  {"TPCOMM_IB_REG_CACHE_SIZE", T::Int, "64", "0..65536",
   "ibverbs transport: registered regions kept for reuse (LRU); entries are dropped when their "
   "memory is unmapped or released (userfaultfd monitor); 0 registers per call.", "ibverbs"},
  {"TPCOMM_IB_RETRY_CNT", T::Int, "7", "0..7",
   "ibverbs transport: transport retry count of RC queue pairs (ibv_qp_attr.retry_cnt).",
   "ibverbs"},
  {"TPCOMM_IB_SL", T::Int, "0", "0..15",
   "ibverbs transport: InfiniBand service level of the queue pairs (ah_attr.sl), as "
   "NCCL_IB_SL.", "ibverbs"},
  {"TPCOMM_IB_STRIPE_SIZE", T::Size, "1M", "",
   "ibverbs transport: with several rails, transfers are split into puts of this size, spread "
   "over the rails.", "ibverbs"},
  {"TPCOMM_IB_TC", T::Int, "0", "0..255",
   "ibverbs transport: traffic class of the queue pairs (ah_attr.grh.traffic_class: DSCP << 2 "
   "on RoCE), as NCCL_IB_TC.", "ibverbs"},
  {"TPCOMM_IB_TIMEOUT", T::Int, "18", "1..31",
   "ibverbs transport: local ACK timeout of RC queue pairs, 4.096 us * 2^value (18: ~1 s), as "
   "NCCL_IB_TIMEOUT.", "ibverbs"},
};
// clang-format on

}  // namespace

Options Options::from_env() {
  Options o;
  o.library = config::get_string("TPCOMM_IBVERBS_LIB");
  o.hca = config::get_string("TPCOMM_IB_HCA");
  o.gid_index = static_cast<int>(config::get_int("TPCOMM_IB_GID_INDEX"));
  o.timeout = static_cast<int>(config::get_int("TPCOMM_IB_TIMEOUT"));
  o.retry_cnt = static_cast<int>(config::get_int("TPCOMM_IB_RETRY_CNT"));
  o.qps_per_connection = static_cast<int>(config::get_int("TPCOMM_IB_QPS_PER_CONNECTION"));
  o.max_rails = static_cast<int>(config::get_int("TPCOMM_IB_MAX_RAILS"));
  o.stripe_size = std::max<size_t>(4096, config::get_size("TPCOMM_IB_STRIPE_SIZE"));
  o.reg_cache_entries = static_cast<size_t>(config::get_int("TPCOMM_IB_REG_CACHE_SIZE"));
  o.traffic_class = static_cast<int>(config::get_int("TPCOMM_IB_TC"));
  o.service_level = static_cast<int>(config::get_int("TPCOMM_IB_SL"));
  o.fork_safe = config::get_bool("TPCOMM_IB_FORK_SAFE");
  return o;
}

}  // namespace tpcomm::ibv

namespace tpcomm::transport {

void register_ibverbs_transport() {
  config::register_params(ibv::kParams);
  register_transport("ibverbs", [](const TransportContext& ctx) -> std::unique_ptr<Transport> {
    return std::make_unique<ibv::IbvTransport>(ctx, ibv::Options::from_env());
  });
}

}  // namespace tpcomm::transport
