// Shared helpers of the topology tests: where the stored machines are, and loading them.
#pragma once

#include <string>
#include <vector>

#include "topology/select.h"
#include "topology/topology.h"

namespace tpcomm::topo::testing {

/// ../shared/topologies, or "" when that folder is absent.
std::string shared_dir();
/// Every *.xml in shared_dir(), sorted; empty when the folder is absent.
std::vector<std::string> shared_files();
/// tests/topology/fixtures/<name>.
std::string fixture(const std::string& name);
/// Every fixture XML, sorted.
std::vector<std::string> fixture_files();
/// Loads shared_dir()/<name>.
Topology load_shared(const std::string& name);

/// One rank per GPU (local ranks 0..G-1, GPU i, bound to the GPU's NUMA node) then one rank
/// per NUMA node (CPU only), all on host `host`, ranks numbered from `first_rank`.
std::vector<Summary> ranks_of(const Topology& t, const std::string& host, int first_rank,
                              const NicOptions& opts = NicOptions{});

/// Sets an environment variable for one scope and re-reads the registry.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  bool had_ = false;
  std::string old_;
};

}  // namespace tpcomm::topo::testing
