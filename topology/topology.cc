// Small accessors of the Topology value.
#include "topology/topology.h"

namespace tpcomm::topo {

std::string Gpu::label() const {
  if (cuda_index >= 0) return "cuda" + std::to_string(cuda_index);
  if (nvml_index >= 0) return "nvml" + std::to_string(nvml_index);
  if (!os_devices.empty()) return os_devices.front();
  return "gpu@" + pci.busid;
}

bool Nic::any_port_active() const {
  if (ports.empty()) return true;
  for (const NicPort& p : ports)
    if (p.active()) return true;
  return false;
}

const Gpu* Topology::find_gpu(std::string_view busid_or_label) const {
  for (const Gpu& g : gpus)
    if (g.pci.busid == busid_or_label || g.label() == busid_or_label) return &g;
  for (const Gpu& g : gpus)
    for (const std::string& d : g.os_devices)
      if (d == busid_or_label) return &g;
  return nullptr;
}

const Nic* Topology::find_nic(std::string_view name) const {
  for (const Nic& n : nics)
    if (n.name == name) return &n;
  return nullptr;
}

}  // namespace tpcomm::topo
