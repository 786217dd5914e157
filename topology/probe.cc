#include "topology/probe.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>

#include "core/config.h"
#include "tpcomm/transport/transport.hpp"
#include "tpcomm/version.hpp"

namespace tpcomm::topo {

namespace {

std::string mib(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30))
    std::snprintf(buf, sizeof(buf), "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  else
    std::snprintf(buf, sizeof(buf), "%.0f MiB", static_cast<double>(bytes) / (1ull << 20));
  return buf;
}

TransportProbe probe_shm() {
  TransportProbe p{"shm", true, false, ""};
  struct stat st;
  if (stat("/dev/shm", &st) != 0 || !S_ISDIR(st.st_mode)) {
    p.detail = "/dev/shm does not exist: mount a tmpfs there (containers: --ipc=host)";
    return p;
  }
  if (access("/dev/shm", W_OK | X_OK) != 0) {
    p.detail = "/dev/shm is not writable by this user";
    return p;
  }
  struct statvfs vfs;
  uint64_t free_bytes = 0, total = 0;
  if (statvfs("/dev/shm", &vfs) == 0) {
    free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    total = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  }
  p.usable = true;
  p.detail = "/dev/shm " + mib(free_bytes) + " free of " + mib(total);
  std::string advice = shm_size_advice(free_bytes);
  if (!advice.empty()) p.detail += "; " + advice;
  return p;
}

TransportProbe probe_tcp() {
  TransportProbe p{"tcp", true, true, ""};
  ifaddrs* list = nullptr;
  std::string ifs;
  bool only_loopback = true;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a; a = a->ifa_next) {
      if (!a->ifa_addr || !(a->ifa_flags & IFF_UP)) continue;
      int fam = a->ifa_addr->sa_family;
      if (fam != AF_INET && fam != AF_INET6) continue;
      char host[INET6_ADDRSTRLEN] = {0};
      const void* src =
          fam == AF_INET
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr);
      inet_ntop(fam, src, host, sizeof(host));
      if (!(a->ifa_flags & IFF_LOOPBACK)) only_loopback = false;
      ifs += (ifs.empty() ? "" : ", ") + std::string(a->ifa_name) + " " + host;
    }
    freeifaddrs(list);
  }
  p.detail = ifs.empty() ? "no interface with an address is up" : "interfaces: " + ifs;
  if (only_loopback) p.detail += " (loopback only: single-host jobs only)";
  return p;
}

TransportProbe probe_ucx() {
  TransportProbe p{"ucx", TPCOMM_HAVE_UCX != 0, false, ""};
  if (!p.built) {
    p.detail = "not built: UCX (libucx-dev) was not found when tpcomm was configured";
    return p;
  }
  transport::register_builtin_transports();
  const std::string lib = config::get_string("TPCOMM_UCX_LIBRARY");
  void* h = dlopen(lib.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    p.detail = lib + " cannot be loaded: " + (e ? e : "?") +
               " (install UCX, set LD_LIBRARY_PATH, or check TPCOMM_UCX_LIBRARY)";
    return p;
  }
  using VersionFn = const char* (*)();
  auto version = reinterpret_cast<VersionFn>(dlsym(h, "ucp_get_version_string"));
  p.usable = true;
  p.detail = lib + " loaded" + (version ? ", UCX " + std::string(version()) : "");
  dlclose(h);
  return p;
}

TransportProbe probe_ibverbs() {
  TransportProbe p{"ibverbs", TPCOMM_HAVE_IBVERBS != 0, false, ""};
  if (!p.built) {
    p.detail =
        "not built: rdma-core headers (infiniband/verbs.h, package libibverbs-dev) were not found "
        "when tpcomm was configured";
    return p;
  }
  // The library the transport itself would open (TPCOMM_IBVERBS_LIB).
  transport::register_builtin_transports();
  const std::string lib = config::get_string("TPCOMM_IBVERBS_LIB");
  void* h = dlopen(lib.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    p.detail = lib + " cannot be loaded: " + (e ? e : "?") +
               " (install rdma-core / libibverbs1, or check TPCOMM_IBVERBS_LIB)";
    return p;
  }
  struct Device;
  using ListFn = Device** (*)(int*);
  using FreeFn = void (*)(Device**);
  using NameFn = const char* (*)(Device*);
  auto list = reinterpret_cast<ListFn>(dlsym(h, "ibv_get_device_list"));
  auto free_list = reinterpret_cast<FreeFn>(dlsym(h, "ibv_free_device_list"));
  auto name = reinterpret_cast<NameFn>(dlsym(h, "ibv_get_device_name"));
  if (!list || !free_list || !name) {
    p.detail = lib + " lacks ibv_get_device_list: a broken rdma-core install";
    dlclose(h);
    return p;
  }
  int n = 0;
  Device** devs = list(&n);
  std::string names;
  for (int i = 0; devs && i < n; ++i)
    names += (names.empty() ? "" : ", ") + std::string(name(devs[i]));
  if (devs) free_list(devs);
  dlclose(h);
  if (n <= 0) {
    p.detail =
        "libibverbs loaded but it lists no RDMA device (no HCA, or its kernel driver and "
        "rdma-core provider are not installed)";
    return p;
  }
  p.usable = true;
  p.detail = "devices: " + names;
  return p;
}

}  // namespace

std::string shm_size_advice(uint64_t free_bytes) {
  if (free_bytes >= (1ull << 30)) return "";
  return "small: shared-memory links between several local ranks need more (Docker's default "
         "is 64 MiB); start the container with --shm-size=8g or --ipc=host";
}

std::vector<TransportProbe> probe_transports() {
  return {probe_shm(), probe_tcp(), probe_ucx(), probe_ibverbs()};
}

std::vector<std::string> usable_transports(const std::vector<TransportProbe>& probes) {
  std::vector<std::string> out;
  for (const TransportProbe& p : probes)
    if (p.built && p.usable) out.push_back(p.name);
  return out;
}

}  // namespace tpcomm::topo
