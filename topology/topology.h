// The machine as a plain, serializable value: host identity, packages, NUMA nodes, GPUs,
// RDMA NICs and network interfaces, each I/O device with its PCI path up to the host bridge.
// hwloc fills it (discover(), load_file()) and never appears outside discover_hwloc.cc, so
// that selection code and its tests work on values, from the real machine or a stored file
// (shared/topologies/, TPCOMM_TOPO_FILE).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tpcomm::topo {

/// How near two devices (or a device and a NUMA node) are, nearest first. The names are
/// those of `nvidia-smi topo -m` and NCCL's path types:
///   PIX  behind one PCIe switch (or functions of one device): at most one switch hop;
///   PXB  behind one tree of PCIe switches, several switch hops, no host bridge;
///   PHB  under one PCIe host bridge (root complex);
///   NODE different host bridges within one CPU package (socket), e.g. across SNC domains;
///   SYS  across the inter-socket link (UPI/xGMI), or nothing known.
/// LOC is the device itself (and, as a GDR level, "never").
enum class Relation : int { LOC = 0, PIX = 1, PXB = 2, PHB = 3, NODE = 4, SYS = 5 };

/// "PIX", "PXB", ...
const char* relation_name(Relation r);
/// One phrase for reasons: "share a PCIe switch", "cross the inter-socket link", ...
const char* relation_phrase(Relation r);
/// Parses "pix", "PXB", ... (case-insensitive); nullopt when unknown.
std::optional<Relation> parse_relation(std::string_view s);

/// A PCI function and where it hangs. `path` lists the bridges from the host bridge down to
/// the device's parent: the host bridge as "0000:[40-4f]" (domain and bus range), PCI
/// bridges and switch ports by bus id "0000:41:00.0".
struct PciDevice {
  std::string busid;  ///< "0000:4e:00.0"; empty for a device without a PCI function
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  uint16_t class_id = 0;  ///< e.g. 0x0302 3D controller, 0x0207 InfiniBand
  double link_gbs = 0;    ///< PCIe link bandwidth in GB/s as hwloc reports it; 0 unknown
  std::vector<std::string> path;
  int numa = -1;     ///< OS index of the NUMA node it is local to; -1 none or several
  int package = -1;  ///< OS index of the package it is local to; -1 unknown

  bool operator==(const PciDevice&) const = default;
};

/// A CPU package (socket).
struct Package {
  int os_index = -1;
  std::string cpuset;  ///< hwloc list syntax, "0-13,112-125"
  bool operator==(const Package&) const = default;
};

/// A NUMA node and the CPUs it serves.
struct NumaNode {
  int os_index = -1;
  int package = -1;  ///< package holding it; -1 unknown
  std::string cpuset;
  uint64_t memory_bytes = 0;
  bool operator==(const NumaNode&) const = default;
};

/// A GPU, found by PCI class (0x0300/0x0302) and vendor (NVIDIA 0x10de, AMD 0x1002), with the
/// CUDA/NVML/OpenCL OS devices hwloc attached where present.
struct Gpu {
  PciDevice pci;
  std::string vendor;  ///< "nvidia" or "amd"
  std::string model;   ///< "NVIDIA H100 80GB HBM3" when hwloc knows it
  int cuda_index = -1;
  int nvml_index = -1;
  std::vector<std::string> os_devices;    ///< "cuda0", "nvml0", "opencl0d0"
  std::vector<std::string> nvlink_peers;  ///< bus ids of GPUs with a direct NVLink
  bool nvswitch = false;                  ///< has NVLinks to an NVSwitch
  uint64_t nvlink_bw = 0;                 ///< total NVLink bandwidth (hwloc's unit, MB/s)

  /// Short name: "cuda0", else "nvml0", else the first OS device, else "gpu@<busid>".
  std::string label() const;
  bool operator==(const Gpu&) const = default;
};

/// One port of an RDMA device.
struct NicPort {
  int number = 1;
  int state = 0;           ///< IB port state: 4 is ACTIVE; 0 unknown
  std::string link_layer;  ///< "InfiniBand" or "Ethernet"; inferred from PCI when not known
  std::string lid;
  std::string gid0;
  double rate_gbps = 0;  ///< from sysfs on the real machine; 0 unknown
  bool active() const { return state == 4 || state == 0; }
  bool operator==(const NicPort&) const = default;
};

/// An RDMA device (OpenFabrics OS device: mlx5_0, an EFA rdmap..s0).
struct Nic {
  std::string name;
  PciDevice pci;
  /// "ib" (InfiniBand), "roce" (RDMA over Ethernet), "efa" (AWS EFA: SRD, not RC verbs),
  /// "iwarp".
  std::string kind;
  std::vector<NicPort> ports;
  std::vector<std::string> netdevs;  ///< network interfaces of the same PCI function

  /// True when the ibverbs transport (RC queue pairs) can drive it.
  bool verbs_capable() const { return kind == "ib" || kind == "roce"; }
  /// True when some port is active (or port states are unknown).
  bool any_port_active() const;
  bool operator==(const Nic&) const = default;
};

/// A network interface hwloc knows (those with a PCI function; loopback and virtual ones
/// are not in hwloc's tree).
struct NetIf {
  std::string name;
  std::string address;  ///< hardware address as hwloc reports it
  PciDevice pci;
  std::string rdma_device;  ///< the OpenFabrics device on the same function, if any
  bool operator==(const NetIf&) const = default;
};

/// The whole machine. Devices are ordered: GPUs by CUDA index then bus id, NICs and interfaces
/// by name with digit runs compared as numbers (mlx5_2 before mlx5_10).
struct Topology {
  std::string host_id;   ///< TPCOMM_HOSTID, else "<hostname>/<boot id>" of the real machine
  std::string hostname;  ///< the machine described (the XML's HostName for a stored file)
  std::string source;    ///< "hwloc" (this machine), "xml:<path>" or "json:<path>"
  std::string hwloc_version;
  std::string cpu_model;
  int cores = 0;
  int pus = 0;
  std::vector<Package> packages;
  std::vector<NumaNode> numa_nodes;
  std::vector<Gpu> gpus;
  std::vector<Nic> nics;
  std::vector<NetIf> netifs;

  const Gpu* find_gpu(std::string_view busid_or_label) const;
  const Nic* find_nic(std::string_view name) const;
  const NumaNode* find_numa(int os_index) const;
  bool operator==(const Topology&) const = default;
};

// ---- discovery (discover_hwloc.cc: the only file that uses hwloc) --------------------------

/// The identity that decides which ranks share a host: TPCOMM_HOSTID when set, else
/// "<hostname>/<boot id>" so that two containers with one hostname on different machines differ.
std::string local_host_id();

/// Discovers this machine with hwloc (I/O devices included). Binds nothing. Throws
/// TransportError when hwloc fails.
Topology discover();

/// Loads a stored machine: an hwloc XML export (v1 or v2) or a tpcomm JSON dump (detected by
/// content). host_id is still this machine's local_host_id(): a loaded file describes the
/// hardware, it does not move the process to another host. Never binds and never touches
/// the real machine. Throws InvalidArgument naming the file and what is wrong.
Topology load_file(const std::string& path);

/// Same for an in-memory hwloc XML document (tests); `what` names it in errors.
Topology load_xml_buffer(std::string_view xml, std::string_view what = "XML buffer");

/// The topology the library uses: TPCOMM_TOPO_FILE when set, else discover(); then writes
/// TPCOMM_TOPO_DUMP_FILE when set (hwloc XML if the name ends in .xml, else JSON).
Topology load_configured();

/// Writes the topology as JSON (or, with hwloc, re-exports XML: see load_configured).
void write_json_file(const Topology& t, const std::string& path);

// ---- relations (relation.cc) ---------------------------------------------------------------

/// Relation of two PCI devices, computed from their stored paths (never via hwloc's
/// common-ancestor call, which crashes on I/O objects under different numbers of bridges).
Relation pci_relation(const PciDevice& a, const PciDevice& b);

/// Relation of memory on NUMA node `numa` (in `t`) to a device: PHB when the device is local
/// to that node, NODE when in the same package, else SYS (also when numa is -1: not bound).
Relation numa_relation(const Topology& t, int numa, const PciDevice& dev);

/// The NUMA node whose CPUs contain every CPU of `cpus` (a process binding, as CPU ids);
/// -1 when they span several nodes or none.
int numa_of_cpus(const Topology& t, const std::vector<int>& cpus);

/// CPU ids of an hwloc list string "0-3,8,10-11"; throws InvalidArgument on bad syntax.
std::vector<int> parse_cpu_list(std::string_view list);

/// The CPUs this process may run on (sched_getaffinity).
std::vector<int> current_cpus();

/// True when both GPUs can reach each other's memory directly (NVLink or NVSwitch, or PCIe
/// up to PXB as NCCL's default P2P level); `why` gets the relation in words.
bool gpus_peer_reachable(const Gpu& a, const Gpu& b, std::string* why);

// ---- serialization (serialize.cc) ----------------------------------------------------------

/// The whole topology as JSON (pretty when indent > 0); round-trips exactly.
std::string to_json(const Topology& t, int indent = 0);
/// Parses to_json output; throws InvalidArgument naming `what` and the problem.
Topology topology_from_json(std::string_view text, std::string_view what = "topology JSON");

// ---- presentation (format.cc) --------------------------------------------------------------

/// A compact tree: packages > NUMA nodes (CPUs, memory) > GPUs, NICs, interfaces with bus ids
/// and PCI paths.
std::string format_tree(const Topology& t);

}  // namespace tpcomm::topo
