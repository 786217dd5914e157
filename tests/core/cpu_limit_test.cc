// container_cpus(): the host's online CPUs cut by the container's cgroup limits (cgroup v2
// cpuset.cpus.effective and cpu.max along the path; v1 cpu.cfs_quota_us/cfs_period_us and
// cpuset.effective_cpus), read from a fake tree built in a temporary directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/cpu_limit.h"

namespace tpcomm {
namespace {

namespace fs = std::filesystem;
using cpu_limit_detail::count_cpu_list;
using cpu_limit_detail::cpu_max_cpus;
using cpu_limit_detail::quota_cpus;
using cpu_limit_detail::container_cpus_under;

// A temporary root with proc/self/cgroup and sys/fs/cgroup, removed at the end.
class FakeRoot {
 public:
  FakeRoot() {
    std::string t = (fs::temp_directory_path() / "tpcomm-cgroup-XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) std::abort();
    root_ = t;
  }
  ~FakeRoot() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  void write(const std::string& rel, const std::string& text) const {
    const fs::path p = fs::path(root_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  const std::string& path() const { return root_; }

 private:
  std::string root_;
};

TEST(CpuLimit, CpuListsAreCounted) {
  EXPECT_EQ(count_cpu_list("0-3,8,10-11\n"), 7);
  EXPECT_EQ(count_cpu_list("5"), 1);
  EXPECT_EQ(count_cpu_list(" 0-63 "), 64);
  EXPECT_EQ(count_cpu_list(""), 0);
  EXPECT_EQ(count_cpu_list("\n"), 0);
  EXPECT_EQ(count_cpu_list("3-1"), 0);    // reversed range
  EXPECT_EQ(count_cpu_list("a-b"), 0);    // garbage
  EXPECT_EQ(count_cpu_list("0-1,x"), 0);  // garbage after a valid part
  EXPECT_EQ(count_cpu_list("0-1000000,0-1000000,0-1000000,0-1000000,0-1000000,0-1000000,"
                           "0-1000000,0-1000000,0-1000000,0-1000000,0-1000000,0-1000000,"
                           "0-1000000,0-1000000,0-1000000,0-1000000,0-1000000,0-1000000"),
            0);  // more CPUs than any machine: garbage, not an overflow
}

TEST(CpuLimit, QuotasRoundDownToAtLeastOne) {
  EXPECT_EQ(quota_cpus(150000, 100000), 1);  // two ranks spinning on 1.5 CPUs get throttled
  EXPECT_EQ(quota_cpus(200000, 100000), 2);
  EXPECT_EQ(quota_cpus(50000, 100000), 1);
  EXPECT_EQ(quota_cpus(9223372036854775807LL, 1), 2147483647);  // no overflow
  EXPECT_EQ(quota_cpus(-1, 100000), 0);  // v1: no limit
  EXPECT_EQ(quota_cpus(100000, 0), 0);
  EXPECT_EQ(cpu_max_cpus("200000 100000\n"), 2);
  EXPECT_EQ(cpu_max_cpus("max 100000\n"), 0);
  EXPECT_EQ(cpu_max_cpus("250000"), 2);  // period omitted: the kernel's default 100000
  EXPECT_EQ(cpu_max_cpus(""), 0);
  EXPECT_EQ(cpu_max_cpus("lots of cpus"), 0);
}

TEST(CpuLimit, WithoutCgroupFilesTheOnlineCpusCount) {
  FakeRoot r;
  EXPECT_EQ(container_cpus_under(r.path(), 64), 64);
  EXPECT_EQ(container_cpus_under(r.path(), 0), 1);
}

TEST(CpuLimit, CgroupV2CpusetAndTheTightestQuotaOnThePath) {
  FakeRoot r;
  r.write("proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  r.write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n");
  // Unlimited at the container, 3 CPUs at the pod, 8 CPUs in its cpuset.
  r.write("sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "max 100000\n");
  r.write("sys/fs/cgroup/kubepods/pod1/cpu.max", "300000 100000\n");
  r.write("sys/fs/cgroup/kubepods/pod1/ctr/cpuset.cpus.effective", "0-7\n");
  EXPECT_EQ(container_cpus_under(r.path(), 64), 3);
  // A cpuset smaller than the quota wins.
  r.write("sys/fs/cgroup/kubepods/pod1/ctr/cpuset.cpus.effective", "4-5\n");
  EXPECT_EQ(container_cpus_under(r.path(), 64), 2);
  // Limits never raise the count above the online CPUs.
  EXPECT_EQ(container_cpus_under(r.path(), 1), 1);
}

TEST(CpuLimit, CgroupV2CpusetOfTheParentWhenTheLeafHasNone) {
  FakeRoot r;  // the container's cgroup does not enable the cpuset controller
  r.write("proc/self/cgroup", "0::/job/rank0\n");
  r.write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu\n");
  r.write("sys/fs/cgroup/job/cpuset.cpus.effective", "0-2\n");
  r.write("sys/fs/cgroup/job/rank0/cpu.max", "max 100000\n");
  EXPECT_EQ(container_cpus_under(r.path(), 64), 3);
  // A path outside the namespace's root reads the root alone.
  r.write("proc/self/cgroup", "0::/../elsewhere\n");
  r.write("sys/fs/cgroup/cpu.max", "400000 100000\n");
  EXPECT_EQ(container_cpus_under(r.path(), 64), 4);
}

TEST(CpuLimit, CgroupV2AtTheNamespaceRoot) {
  FakeRoot r;  // a container with its own cgroup namespace sees itself as "/"
  r.write("proc/self/cgroup", "0::/\n");
  r.write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu\n");
  r.write("sys/fs/cgroup/cpu.max", "200000 100000\n");
  EXPECT_EQ(container_cpus_under(r.path(), 16), 2);
}

TEST(CpuLimit, CgroupV1QuotaAndCpuset) {
  FakeRoot r;
  r.write("proc/self/cgroup",
          "11:cpuset:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n");
  r.write("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
  r.write("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  r.write("sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_quota_us", "400000\n");
  r.write("sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_period_us", "100000\n");
  r.write("sys/fs/cgroup/cpuset/docker/abc/cpuset.effective_cpus", "0-31\n");
  EXPECT_EQ(container_cpus_under(r.path(), 32), 4);
  r.write("sys/fs/cgroup/cpuset/docker/abc/cpuset.effective_cpus", "0,2,4\n");
  EXPECT_EQ(container_cpus_under(r.path(), 32), 3);
}

// Docker on cgroup v1 without a cgroup namespace: /proc/self/cgroup names the host's path,
// while the container's own cgroup is bind-mounted at the hierarchy's root.
TEST(CpuLimit, CgroupV1BindMountedAtTheRoot) {
  FakeRoot r;
  r.write("proc/self/cgroup", "11:cpuset:/docker/abc\n4:cpu,cpuacct:/docker/abc\n");
  r.write("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "300000\n");
  r.write("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  r.write("sys/fs/cgroup/cpuset/cpuset.effective_cpus", "0-1\n");
  EXPECT_EQ(container_cpus_under(r.path(), 64), 2);
  r.write("sys/fs/cgroup/cpuset/cpuset.effective_cpus", "0-15\n");
  EXPECT_EQ(container_cpus_under(r.path(), 64), 3);
}

TEST(CpuLimit, GarbageInTheFilesIsIgnored) {
  FakeRoot r;
  r.write("proc/self/cgroup", "no colons here\n0::/a\n");
  r.write("sys/fs/cgroup/cgroup.controllers", "cpu\n");
  r.write("sys/fs/cgroup/a/cpu.max", "fast 100000\n");
  r.write("sys/fs/cgroup/a/cpuset.cpus.effective", "zero-seven\n");
  EXPECT_EQ(container_cpus_under(r.path(), 8), 8);
}

TEST(CpuLimit, ThisMachineHasAtLeastOne) {
  const int n = container_cpus();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}

}  // namespace
}  // namespace tpcomm
