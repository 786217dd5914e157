// What tpinfo prints, as functions of plain values so that tests can check them.
#pragma once

#include <string>
#include <vector>

#include "cuda/cuda.h"
#include "topology/probe.h"
#include "topology/select.h"
#include "topology/topology.h"

namespace tpcomm::tpinfo {

/// Everything one report shows.
struct Inputs {
  topo::Topology topology;
  std::vector<topo::TransportProbe> transports;
  topo::NicOptions nic_options;
  bool stored = false;      ///< the topology comes from a file given with --topo
  cuda::DriverStatus cuda;  ///< this process's CUDA driver (cuda::driver_status())
};

/// "tpcomm 0.1.0 (build: ucx ibverbs cuda-driver -nccl)".
std::string version_line();

/// The CUDA section: whether the build has CUDA support, the driver and its devices (or why
/// there is none), and what CUDA tensors get.
std::string cuda_section(const cuda::DriverStatus& st);

/// The transports section: built, usable, detail.
std::string transports_section(const std::vector<topo::TransportProbe>& probes);

/// The GPU x NIC relations with GPUDirect yes/no: a table for up to 8 NICs, else grouped lines.
/// Empty when there are no GPUs or no NICs.
std::string gpu_nic_section(const topo::Topology& t, const topo::NicOptions& o);

/// The NIC each GPU and each NUMA node would use, and why (local rank 0).
std::string nic_choice_section(const topo::Topology& t, const topo::NicOptions& o);

/// Every registry variable: value (or unset), default, type and meaning.
std::string variables_section();

/// The whole text report.
std::string text_report(const Inputs& in);

/// The same content as one JSON document.
std::string json_report(const Inputs& in);

}  // namespace tpcomm::tpinfo
