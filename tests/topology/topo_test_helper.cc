#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>

#include "core/config.h"
#include "topology/topo_test_util.h"

namespace tpcomm::topo::testing {

namespace {

std::vector<std::string> xml_files(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 4 && n.substr(n.size() - 4) == ".xml") out.push_back(dir + "/" + n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string shared_dir() {
  std::string d = std::string(TPCOMM_TEST_SHARED_DIR) + "/topologies";
  struct stat st;
  return stat(d.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? d : "";
}

std::vector<std::string> shared_files() {
  std::string d = shared_dir();
  return d.empty() ? std::vector<std::string>{} : xml_files(d);
}

std::string fixture(const std::string& name) {
  return std::string(TPCOMM_TEST_SOURCE_DIR) + "/tests/topology/fixtures/" + name;
}

std::vector<std::string> fixture_files() {
  return xml_files(std::string(TPCOMM_TEST_SOURCE_DIR) + "/tests/topology/fixtures");
}

Topology load_shared(const std::string& name) { return load_file(shared_dir() + "/" + name); }

std::vector<Summary> ranks_of(const Topology& t, const std::string& host, int first_rank,
                              const NicOptions& opts) {
  Topology h = t;
  h.host_id = host;
  std::vector<Summary> out;
  int local = 0;
  for (const Gpu& g : h.gpus) {
    Placement p;
    p.rank = first_rank + local;
    p.local_rank = local++;
    p.numa = g.pci.numa;
    p.gpu = g.pci.busid;
    out.push_back(make_summary(h, p, opts, {}));
  }
  for (const NumaNode& n : h.numa_nodes) {
    Placement p;
    p.rank = first_rank + local;
    p.local_rank = local++;
    p.numa = n.os_index;
    out.push_back(make_summary(h, p, opts, {}));
  }
  return out;
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (auto v = config::raw(name)) had_ = true, old_ = *v;
  setenv(name, value, 1);
  config::reload();
}

ScopedEnv::~ScopedEnv() {
  if (had_)
    setenv(name_.c_str(), old_.c_str(), 1);
  else
    unsetenv(name_.c_str());
  config::reload();
}

}  // namespace tpcomm::topo::testing
