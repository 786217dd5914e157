// How many CPUs the ranks of this host can really run on: the host's online CPUs, cut by the
// container's limits (its cgroup's cpuset and CPU quota). A job in a 2-CPU pod on a 64-core
// node is oversubscribed with 8 ranks, though the node has 64 CPUs online.
#pragma once

#include <string>

namespace tpcomm {

/// The CPUs this process's container may use: sysconf's online CPUs, limited by its cgroup's
/// cpuset (`cpuset.cpus.effective`, v2; `cpuset.effective_cpus`, v1; the deepest readable one
/// on the path) and CPU quota (`cpu.max`, v2; `cpu.cfs_quota_us` / `cpu.cfs_period_us`, v1; the
/// smallest on the path to the root), a quota rounded down. Not this process's affinity: ranks
/// pinned one per core are not oversubscribed. At least 1. Reads a few files under /proc and
/// /sys/fs/cgroup. Assumes the host's ranks share this container (ranks in containers of
/// their own see only their own limit).
int container_cpus();

namespace cpu_limit_detail {

/// The number of CPUs in a Linux CPU list ("0-3,8,10-11\n" -> 7); 0 when malformed or empty.
int count_cpu_list(const std::string& list);

/// CPUs granted by a quota over a period, rounded down and at least 1 (150000/100000 -> 1);
/// 0 for no limit (a quota <= 0, "max") or a malformed pair.
int quota_cpus(long long quota, long long period);

/// CPUs granted by a cgroup v2 `cpu.max` line ("200000 100000" -> 2, "max 100000" -> 0).
int cpu_max_cpus(const std::string& line);

/// container_cpus() with the files read under `root` instead of "/" (tests build a fake tree):
/// `root`/proc/self/cgroup names the cgroup, `root`/sys/fs/cgroup holds the hierarchies.
int container_cpus_under(const std::string& root, int online);

}  // namespace cpu_limit_detail

}  // namespace tpcomm
