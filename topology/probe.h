// Which transports this build has and which can work on this machine right now, with the
// reason when one cannot. tpinfo prints it; the process group publishes the usable ones in
// each rank's summary so that both ends of a link only consider transports both can run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpcomm::topo {

/// One transport as seen from this process.
struct TransportProbe {
  std::string name;    ///< "shm", "tcp", "ucx", "ibverbs"
  bool built = false;  ///< compiled into this libtpcomm
  bool usable = false;
  std::string detail;  ///< what was found, or why not and what to do
};

/// Probes shm (/dev/shm present, writable, its size), tcp (interfaces with an address), ucx
/// (libucp loadable) and ibverbs (libibverbs loadable, RDMA devices listed). Loads libraries
/// with dlopen and opens no device.
std::vector<TransportProbe> probe_transports();

/// Names of the usable ones, in probe order.
std::vector<std::string> usable_transports(const std::vector<TransportProbe>& probes);

/// Advice for a /dev/shm of `free_bytes` ("" when it is large enough).
std::string shm_size_advice(uint64_t free_bytes);

}  // namespace tpcomm::topo
