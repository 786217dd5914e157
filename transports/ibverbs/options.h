// Settings of the ibverbs transport, read from the registry (factory.cc registers them).
#pragma once

#include <cstddef>
#include <string>

namespace tpcomm::ibv {

/// TPCOMM_IBVERBS_LIB, TPCOMM_IB_* (see factory.cc for their descriptions).
struct Options {
  std::string library = "libibverbs.so.1";
  std::string hca;     ///< TPCOMM_IB_HCA, NCCL_IB_HCA syntax
  int gid_index = -1;  ///< -1: chosen by type (RoCE v2 first)
  int timeout = 18;    ///< ibv_qp_attr.timeout: 4.096 us * 2^timeout
  int retry_cnt = 7;   ///< ibv_qp_attr.retry_cnt
  int qps_per_connection = 1;
  int max_rails = 0;              ///< TPCOMM_IB_MAX_RAILS; 0: every NIC at equal distance
  size_t stripe_size = 1u << 20;  ///< TPCOMM_IB_STRIPE_SIZE: put size with several rails
  size_t reg_cache_entries = 64;  ///< TPCOMM_IB_REG_CACHE_SIZE; 0 disables the cache
  int traffic_class = 0;          ///< TPCOMM_IB_TC: ah_attr.grh.traffic_class
  int service_level = 0;          ///< TPCOMM_IB_SL: ah_attr.sl
  bool fork_safe = false;         ///< TPCOMM_IB_FORK_SAFE: ibv_fork_init() before any verbs
  static Options from_env();
};

}  // namespace tpcomm::ibv
