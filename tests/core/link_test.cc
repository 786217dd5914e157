// How libtpcomm.so is linked: properties the library's fork safety relies on.
#include <elf.h>
#include <gtest/gtest.h>
#include <link.h>

#include <cstring>
#include <string>

#include "tpcomm/tpcomm.hpp"

namespace {

struct Found {
  std::string path;
  bool bind_now = false;
};

int visit(dl_phdr_info* info, size_t, void* data) {
  auto* found = static_cast<Found*>(data);
  if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, "libtpcomm.so") == nullptr) {
    return 0;
  }
  found->path = info->dlpi_name;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
    const auto* dyn =
        reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    for (; dyn->d_tag != DT_NULL; ++dyn) {
      if (dyn->d_tag == DT_BIND_NOW) found->bind_now = true;
      if (dyn->d_tag == DT_FLAGS && (dyn->d_un.d_val & DF_BIND_NOW) != 0) found->bind_now = true;
      if (dyn->d_tag == DT_FLAGS_1 && (dyn->d_un.d_val & DF_1_NOW) != 0) found->bind_now = true;
    }
  }
  return 1;
}

// The library binds every symbol at load time (-z now): none of its threads ever enters the
// dynamic linker's lazy resolver, so an application fork() cannot catch one there (a child
// inheriting that thread-scope flag hangs in its next dlclose).
TEST(Link, LibraryIsBoundAtLoadTime) {
  ASSERT_FALSE(tpcomm::is_initialized());  // a call into the library: it is loaded
  Found found;
  dl_iterate_phdr(visit, &found);
  ASSERT_FALSE(found.path.empty()) << "libtpcomm.so is not among the loaded objects";
  EXPECT_TRUE(found.bind_now) << found.path << " has no BIND_NOW flag: link it with -z now";
}

}  // namespace
