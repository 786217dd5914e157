// tpcomm._C: module entry, error translation, tensor conversion, Work.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include <string>

#include "common.h"

namespace tpcomm::py {
namespace {

// Python classes for tpcomm's C++ exceptions, set once by tpcomm/_errors.py at import.
enum ErrorKind {
  kError,
  kTimeout,
  kStore,
  kInvalid,
  kConfig,
  kPeer,
  kTransport,
  kNotSupported,
  kAborted,
  kMismatch,
  kNumKinds
};
const char* const kKindNames[kNumKinds] = {
    "Error",     "TimeoutError",   "StoreError",        "InvalidArgument", "ConfigError",
    "PeerError", "TransportError", "NotSupportedError", "AbortedError",    "MismatchError"};
PyObject* g_types[kNumKinds] = {};

int kind_of(const Error& e) {
  if (dynamic_cast<const TimeoutError*>(&e)) return kTimeout;
  if (dynamic_cast<const StoreError*>(&e)) return kStore;
  if (dynamic_cast<const ConfigError*>(&e)) return kConfig;
  if (dynamic_cast<const InvalidArgument*>(&e)) return kInvalid;
  if (dynamic_cast<const PeerError*>(&e)) return kPeer;
  if (dynamic_cast<const TransportError*>(&e)) return kTransport;
  if (dynamic_cast<const NotSupportedError*>(&e)) return kNotSupported;
  if (dynamic_cast<const AbortedError*>(&e)) return kAborted;
  if (dynamic_cast<const MismatchError*>(&e)) return kMismatch;
  return kError;
}

PyObject* type_for(int kind) { return g_types[kind] ? g_types[kind] : PyExc_RuntimeError; }

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    PyErr_SetString(type_for(kind_of(e)), e.what());
  }
}

void set_error_types(nb::dict types) {
  for (int k = 0; k < kNumKinds; ++k) {
    nb::object t = types[kKindNames[k]];
    Py_XDECREF(g_types[k]);
    g_types[k] = t.release().ptr();
  }
}

// Objects of waits cut by a signal: the engine may still use their memory.
std::vector<nb::object>& abandoned() {
  static auto* v = new std::vector<nb::object>();
  return *v;
}

constexpr Ms kSlice{100};

}  // namespace

nb::object exception_object(const std::exception_ptr& p) {
  if (!p) return nb::none();
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    return nb::borrow(type_for(kind_of(e)))(std::string(e.what()));
  } catch (const std::exception& e) {
    return nb::borrow(PyExc_RuntimeError)(std::string(e.what()));
  }
}

Ms to_ms(const std::optional<double>& seconds) {
  if (!seconds || !(*seconds > 0)) return Ms{0};
  return Ms{static_cast<int64_t>(*seconds * 1000.0 + 0.5)};
}

void wait_interruptible(Work& w, std::optional<Ms> timeout, nb::handle keep) {
  using Clock = std::chrono::steady_clock;
  const auto until = timeout ? Clock::now() + *timeout : Clock::time_point::max();
  for (;;) {
    Ms slice = kSlice;
    if (timeout) {
      auto left = std::chrono::duration_cast<Ms>(until - Clock::now());
      slice = std::max(Ms{0}, std::min(slice, left));
    }
    {
      nb::gil_scoped_release release;
      try {
        w.wait(slice);
        return;
      } catch (const TimeoutError&) {
        // The slice ran out, or the operation itself failed with a timeout (then it is
        // complete and waiting again rethrows its own error).
        if (w.is_completed()) {
          w.wait(Ms{0});
          return;
        }
        if (timeout && Clock::now() >= until) throw;
      }
    }
    if (PyErr_CheckSignals() != 0) {
      if (keep.is_valid() && !keep.is_none()) abandoned().push_back(nb::borrow(keep));
      throw nb::python_error();
    }
  }
}

nb::object finish(std::shared_ptr<Work> w, const GroupPtr& g, bool async_op, nb::object keep) {
  if (async_op) return nb::cast(PyWork{std::move(w), g, std::move(keep)});
  wait_interruptible(*w, std::nullopt, keep);
  return nb::none();
}

void bind_errors(nb::module_& m) {
  nb::register_exception_translator(translate);
  m.def("_set_error_types", &set_error_types);
}

namespace {

void bind_work(nb::module_& m) {
  nb::class_<PyWork>(m, "Work")
      .def(
          "wait",
          [](PyWork& w, std::optional<double> timeout) {
            std::optional<Ms> t;
            if (timeout) t = Ms{static_cast<int64_t>(std::max(0.0, *timeout) * 1000.0 + 0.5)};
            wait_interruptible(*w.work, t, w.keep);
            return true;
          },
          nb::arg("timeout").none() = nb::none(),
          "Blocks until done (timeout in seconds; None: the operation's own deadline). "
          "Raises the operation's error; Ctrl-C interrupts it.")
      .def("is_completed", [](PyWork& w) { return w.work->is_completed(); })
      .def("is_success", [](PyWork& w) { return w.work->is_success(); })
      .def("exception", [](PyWork& w) { return exception_object(w.work->exception()); })
      .def("_source_group_rank", [](PyWork& w) { return w.work->source_rank(); })
      .def_prop_ro("group", [](PyWork& w) { return w.group; })
      .def_prop_ro("keep", [](PyWork& w) { return w.keep; });
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "tpcomm's C++ library, bound thinly; use the tpcomm package, not this module.";
  // Objects held at exit by long-lived owners (torch keeps its backends until the end) are
  // not leaks of these bindings.
  nb::set_leak_warnings(false);
  bind_errors(m);
  bind_tensor(m);
  bind_work(m);
  bind_stores(m);
  bind_groups(m);
  bind_ops(m);
  bind_extras(m);
}

}  // namespace tpcomm::py
