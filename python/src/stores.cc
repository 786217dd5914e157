// Key-value stores: Store, TCPStore, FileStore, HashStore, PrefixStore. Values are bytes
// (str is encoded as UTF-8). Blocking calls release the GIL; each has its store's deadline.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "common.h"

namespace tpcomm::py {
namespace {

Bytes to_value(nb::handle v, const char* what) {
  if (nb::isinstance<nb::bytes>(v)) {
    nb::bytes b = nb::borrow<nb::bytes>(v);
    const auto* p = static_cast<const uint8_t*>(b.data());
    return Bytes(p, p + b.size());
  }
  if (nb::isinstance<nb::str>(v)) {
    std::string s = nb::cast<std::string>(v);
    return Bytes(s.begin(), s.end());
  }
  if (nb::isinstance<nb::bytearray>(v)) {
    nb::bytearray b = nb::borrow<nb::bytearray>(v);
    const auto* p = static_cast<const uint8_t*>(b.data());
    return Bytes(p, p + b.size());
  }
  throw InvalidArgument(std::string(what) + ": expected bytes or str, got " +
                        nb::type_name(v.type()).c_str());
}

nb::bytes to_py(const Bytes& b) { return nb::bytes(b.data(), b.size()); }

using StorePtr = std::shared_ptr<Store>;
using nb::gil_scoped_release;

}  // namespace

namespace {

void bind_store_base(nb::module_& m) {
  nb::class_<Store>(m, "Store")
      .def("set",
           [](Store& s, const std::string& key, nb::handle value) {
             Bytes v = to_value(value, "Store.set");
             gil_scoped_release r;
             s.set(key, v);
           })
      .def(
          "get",
          [](Store& s, const std::string& key, std::optional<double> timeout) {
            Bytes v;
            {
              gil_scoped_release r;
              if (timeout) s.wait({key}, to_ms(timeout));
              v = s.get(key);
            }
            return to_py(v);
          },
          nb::arg("key"), nb::arg("timeout").none() = nb::none())
      .def("add",
           [](Store& s, const std::string& key, int64_t amount) {
             gil_scoped_release r;
             return s.add(key, amount);
           })
      .def("compare_set",
           [](Store& s, const std::string& key, nb::handle expected, nb::handle desired) {
             Bytes e = to_value(expected, "Store.compare_set"),
                   d = to_value(desired, "Store.compare_set");
             Bytes v;
             {
               gil_scoped_release r;
               v = s.compare_set(key, e, d);
             }
             return to_py(v);
           })
      .def("delete_key",
           [](Store& s, const std::string& key) {
             gil_scoped_release r;
             return s.delete_key(key);
           })
      .def("check",
           [](Store& s, const std::vector<std::string>& keys) {
             gil_scoped_release r;
             return s.check(keys);
           })
      .def(
          "wait",
          [](Store& s, const std::vector<std::string>& keys, std::optional<double> timeout) {
            gil_scoped_release r;
            if (timeout)
              s.wait(keys, to_ms(timeout));
            else
              s.wait(keys);
          },
          nb::arg("keys"), nb::arg("timeout").none() = nb::none())
      .def("num_keys",
           [](Store& s) {
             gil_scoped_release r;
             return s.num_keys();
           })
      .def("append",
           [](Store& s, const std::string& key, nb::handle value) {
             Bytes v = to_value(value, "Store.append");
             gil_scoped_release r;
             s.append(key, v);
           })
      .def("multi_get",
           [](Store& s, const std::vector<std::string>& keys) {
             std::vector<Bytes> vs;
             {
               gil_scoped_release r;
               vs = s.multi_get(keys);
             }
             nb::list out;
             for (const Bytes& v : vs) out.append(to_py(v));
             return out;
           })
      .def("multi_set",
           [](Store& s, const std::vector<std::string>& keys, nb::handle values) {
             std::vector<Bytes> vs;
             for (nb::handle v : values) vs.push_back(to_value(v, "Store.multi_set"));
             gil_scoped_release r;
             s.multi_set(keys, vs);
           })
      .def("set_timeout", [](Store& s, double seconds) { s.set_timeout(to_ms(seconds)); })
      .def_prop_ro("timeout", [](Store& s) { return s.timeout().count() / 1000.0; });
}

}  // namespace

void bind_stores(nb::module_& m) {
  bind_store_base(m);

  nb::class_<TCPStore, Store>(m, "TCPStore")
      .def(
          "__init__",
          [](TCPStore* t, const std::string& host, int port, int world_size, bool is_master,
             double timeout, bool wait_for_workers) {
            if (port < 0 || port > 65535)
              throw InvalidArgument("TCPStore: port must be in 0..65535, got " +
                                    std::to_string(port));
            gil_scoped_release r;
            new (t) TCPStore(host, static_cast<uint16_t>(port), world_size, is_master,
                             to_ms(timeout), wait_for_workers);
          },
          nb::arg("host_name"), nb::arg("port"), nb::arg("world_size"), nb::arg("is_master"),
          nb::arg("timeout"), nb::arg("wait_for_workers"))
      .def_prop_ro("port", &TCPStore::port)
      .def_prop_ro("host", &TCPStore::host);
  nb::class_<FileStore, Store>(m, "FileStore")
      .def(
          "__init__",
          [](FileStore* f, const std::string& path, int world_size) {
            gil_scoped_release r;
            new (f) FileStore(path, world_size);
          },
          nb::arg("file_name"), nb::arg("world_size"))
      .def_prop_ro("path", &FileStore::path);
  nb::class_<HashStore, Store>(m, "HashStore").def(nb::init<>());
  nb::class_<PrefixStore, Store>(m, "PrefixStore")
      .def(nb::init<std::string, StorePtr>(), nb::arg("prefix"), nb::arg("store"))
      .def_prop_ro("prefix", &PrefixStore::prefix)
      .def_prop_ro("underlying_store", &PrefixStore::underlying);

  m.def(
      "rendezvous",
      [](const std::string& url, int rank, int world_size, double timeout) {
        RendezvousResult res;
        {
          gil_scoped_release r;
          res = rendezvous(url, rank, world_size, to_ms(timeout));
        }
        return nb::make_tuple(res.store, res.rank, res.world_size);
      },
      nb::arg("url"), nb::arg("rank"), nb::arg("world_size"), nb::arg("timeout"));
}

}  // namespace tpcomm::py
