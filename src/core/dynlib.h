// Run-time loading of optional libraries (libucp, libibverbs): one place for dlopen and its
// error message, so that every transport that loads a library fails the same clear way.
#pragma once

#include <string>

namespace tpcomm::dynlib {

/// dlopen(library, RTLD_NOW | RTLD_LOCAL). The handle is never closed (these libraries keep
/// process-wide state). Throws NotSupportedError "<what> '<library>': <dlerror> (<advice>)",
/// e.g. what = "ucx transport: cannot load UCX library", advice = "install UCX, or set ...".
void* open(const std::string& library, const std::string& what, const std::string& advice);

}  // namespace tpcomm::dynlib
