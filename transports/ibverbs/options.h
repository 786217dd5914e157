// Settings of the ibverbs transport, read from the registry (factory.cc registers them).
#pragma once

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
  static Options from_env();
};

}  // namespace tpcomm::ibv
