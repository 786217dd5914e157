// Container CPU limits from cgroup files (cpu_limit.h).
#include "core/cpu_limit.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <fstream>
#include <sstream>
#include <vector>

namespace tpcomm {

namespace cpu_limit_detail {

namespace {

// The whole file, or "" when it cannot be read.
std::string read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return "";
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// The whole of `s` as an integer (an optional '-', digits, nothing else).
bool parse_ll(const std::string& s, long long* v) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, *v);
  return ec == std::errc() && p == end && !s.empty();
}

// The cgroup paths of this process from /proc/self/cgroup: the v2 path ("0::/a/b") and, per
// v1 controller, its path ("4:cpu,cpuacct:/a").
struct Membership {
  std::string v2;
  bool has_v2 = false;
  std::string cpu_v1, cpuset_v1;
  bool has_cpu_v1 = false, has_cpuset_v1 = false;
};

Membership membership(const std::string& text) {
  Membership m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string ctrls = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && ctrls.empty()) {
      m.v2 = path;
      m.has_v2 = true;
      continue;
    }
    std::istringstream cs(ctrls);
    std::string c;
    while (std::getline(cs, c, ',')) {
      if (c == "cpu") {
        m.cpu_v1 = path;
        m.has_cpu_v1 = true;
      } else if (c == "cpuset") {
        m.cpuset_v1 = path;
        m.has_cpuset_v1 = true;
      }
    }
  }
  return m;
}

// `path` and its ancestors up to "/", deepest first ("/a/b" -> "/a/b", "/a", ""). A path
// outside the namespace's root ("/../x", a process in another cgroup namespace) gives the root
// alone.
std::vector<std::string> lineage(std::string path) {
  std::vector<std::string> out;
  if (path.find("..") != std::string::npos) path.clear();
  while (!path.empty() && path.back() == '/') path.pop_back();
  for (;;) {
    out.push_back(path);
    if (path.empty()) break;
    const size_t slash = path.rfind('/');
    path = slash == std::string::npos ? "" : path.substr(0, slash);
  }
  return out;
}

// The CPU list of the deepest cgroup on `dirs` whose `file` is readable and well formed: a
// container's own cgroup is often the mount's root (a bind mount; /proc/self/cgroup still
// names the host's path), or lacks the cpuset controller (its parent's set applies).
int cpuset_along(const std::string& base, const std::vector<std::string>& dirs, const char* file) {
  for (const std::string& d : dirs) {
    const int n = count_cpu_list(read_file(base + d + "/" + file));
    if (n > 0) return n;
  }
  return 0;
}

// The smaller positive limit (0: none).
int tighter(int a, int b) {
  if (a <= 0) return b;
  if (b <= 0) return a;
  return std::min(a, b);
}

// A v1 hierarchy's directory: the controller may be mounted alone or co-mounted
// ("cpu,cpuacct"); the first that exists is taken.
std::string v1_dir(const std::string& cg, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    const std::string d = cg + "/" + n;
    if (::access(d.c_str(), F_OK) == 0) return d;
  }
  return "";
}

}  // namespace

int count_cpu_list(const std::string& list) {
  const std::string s = trim(list);
  if (s.empty()) return 0;
  int count = 0;
  std::istringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) {
    part = trim(part);
    const size_t dash = part.find('-');
    long long lo = 0, hi = 0;
    if (dash == std::string::npos) {
      if (!parse_ll(part, &lo) || lo < 0) return 0;
      hi = lo;
    } else if (!parse_ll(part.substr(0, dash), &lo) || !parse_ll(part.substr(dash + 1), &hi) ||
               lo < 0 || hi < lo || hi - lo > 1 << 20) {
      return 0;
    }
    count += static_cast<int>(hi - lo + 1);
    if (count > 1 << 24) return 0;  // no machine has that many: garbage
  }
  return count;
}

int quota_cpus(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return 0;
  // Rounded down (at least 1): ranks that spin on a fraction of a CPU are throttled.
  const long long n = std::max(1LL, quota / period);
  return n > INT_MAX ? INT_MAX : static_cast<int>(n);
}

int cpu_max_cpus(const std::string& line) {
  std::istringstream in(trim(line));
  std::string q, p;
  if (!(in >> q)) return 0;
  if (!(in >> p)) p = "100000";
  long long quota = 0, period = 0;
  if (q == "max" || !parse_ll(q, &quota) || !parse_ll(p, &period)) return 0;
  return quota_cpus(quota, period);
}

int container_cpus_under(const std::string& root, int online) {
  int n = online > 0 ? online : 1;
  const Membership m = membership(read_file(root + "/proc/self/cgroup"));
  const std::string cg = root + "/sys/fs/cgroup";
  int limit = 0;
  if (m.has_v2) {
    // The unified hierarchy, mounted at /sys/fs/cgroup or (hybrid) at .../unified.
    for (const std::string& base : {cg, cg + "/unified"}) {
      if (::access((base + "/cgroup.controllers").c_str(), F_OK) != 0) continue;
      const auto dirs = lineage(m.v2);
      limit = tighter(limit, cpuset_along(base, dirs, "cpuset.cpus.effective"));
      for (const std::string& d : dirs)
        limit = tighter(limit, cpu_max_cpus(read_file(base + d + "/cpu.max")));
      break;
    }
  }
  if (m.has_cpu_v1) {
    const std::string d = v1_dir(cg, {"cpu,cpuacct", "cpu", "cpuacct,cpu"});
    if (!d.empty()) {
      for (const std::string& p : lineage(m.cpu_v1)) {
        long long quota = 0, period = 0;
        if (parse_ll(trim(read_file(d + p + "/cpu.cfs_quota_us")), &quota) &&
            parse_ll(trim(read_file(d + p + "/cpu.cfs_period_us")), &period))
          limit = tighter(limit, quota_cpus(quota, period));
      }
    }
  }
  if (m.has_cpuset_v1) {
    const std::string d = v1_dir(cg, {"cpuset"});
    if (!d.empty())
      limit = tighter(limit, cpuset_along(d, lineage(m.cpuset_v1), "cpuset.effective_cpus"));
  }
  return std::max(1, tighter(n, limit));
}

}  // namespace cpu_limit_detail

int container_cpus() {
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return cpu_limit_detail::container_cpus_under(
      "", online > 0 && online < INT_MAX ? static_cast<int>(online) : 1);
}

}  // namespace tpcomm
