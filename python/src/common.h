// Shared pieces of the extension tpcomm._C: tensor conversion, errors, Work, interruptible
// waits. The bindings are thin: every operation is one call of the public C++ API.
#pragma once

#include <nanobind/nanobind.h>

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <vector>

#include "tpcomm/tpcomm.hpp"

namespace tpcomm::py {

namespace nb = nanobind;
using GroupPtr = std::shared_ptr<ProcessGroup>;
using Ms = std::chrono::milliseconds;

/// A view of `obj` (a tpcomm._C.Tensor, or an array speaking DLPack or the buffer protocol):
/// C-contiguous, of a tpcomm dtype, writable when `writable`. Raises tpcomm.InvalidArgument
/// naming `what` otherwise. No copy is ever made.
Tensor to_tensor(nb::handle obj, bool writable, const char* what);
/// The same for every element of a sequence.
std::vector<Tensor> to_tensors(nb::handle seq, bool writable, const char* what);

/// Seconds (None or <= 0: 0, which means the group's or store's default) to milliseconds.
Ms to_ms(const std::optional<double>& seconds);

/// The Python exception object for a C++ error (tpcomm's own types, else RuntimeError).
nb::object exception_object(const std::exception_ptr& e);

/// An operation handed to Python: the C++ Work, its group (for source ranks), and the Python
/// objects whose memory it uses, kept alive until it is done.
struct PyWork {
  std::shared_ptr<Work> work;
  GroupPtr group;
  nb::object keep;
};

/// Waits for `w` with the GIL released, in slices, checking for signals (Ctrl-C) between
/// them; `timeout` None: the operation's own deadline ends it. A wait cut by a signal leaves
/// the operation running, so `keep` is kept alive for good (the engine may still write it).
void wait_interruptible(Work& w, std::optional<Ms> timeout, nb::handle keep);

/// Blocking (async_op false): waits as above and returns None; else returns a PyWork.
nb::object finish(std::shared_ptr<Work> w, const GroupPtr& g, bool async_op, nb::object keep);

void bind_errors(nb::module_& m);
void bind_tensor(nb::module_& m);
void bind_stores(nb::module_& m);
void bind_groups(nb::module_& m);
void bind_ops(nb::module_& m);
void bind_extras(nb::module_& m);

}  // namespace tpcomm::py
