// The job's TCPStore, served by tprun itself on node 0: it is listening (on a known port)
// before the first worker starts, and it survives worker restarts.
#include <string>

#include "core/log.h"
#include "launch/launch_internal.h"
#include "tpcomm/error.hpp"
#include "tpcomm/store.hpp"

namespace tpcomm::launch::detail {

StoreHost::StoreHost(const std::string& host, int port, const std::string& job_id) {
  TCPStoreOptions opts;
  opts.job_id = job_id;
  opts.is_master = true;
  opts.server_only = true;
  opts.wait_for_workers = false;
  try {
    store_ = std::make_unique<TCPStore>(host, static_cast<uint16_t>(port), opts);
  } catch (const std::exception& e) {
    std::string where = host + ":" + std::to_string(port);
    throw Error("tprun: cannot host the job's store on " + where + ": " + e.what() +
                (port != 0 ? "; pick another --master-port, or --standalone / --master-port 0 "
                             "for a free one on a single node"
                           : ""));
  }
  port_ = store_->port();
  TPLOG(INFO, LAUNCH) << "tprun: hosting the job's TCPStore on " << host << ":" << port_ << " (job "
                      << job_id << ")";
}

StoreHost::~StoreHost() = default;

}  // namespace tpcomm::launch::detail
