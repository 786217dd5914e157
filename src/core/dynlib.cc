// dlopen with a clear error: see dynlib.h.
#include "core/dynlib.h"

#include <dlfcn.h>

#include "tpcomm/error.hpp"

namespace tpcomm::dynlib {

void* open(const std::string& library, const std::string& what, const std::string& advice) {
  void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    throw NotSupportedError(what + " '" + library + "': " + (why ? why : "unknown error") + " (" +
                            advice + ")");
  }
  return h;
}

}  // namespace tpcomm::dynlib
