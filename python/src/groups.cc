// Process groups: init/destroy, the world, subgroups, rank helpers, DeviceMesh.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "common.h"

namespace tpcomm::py {
namespace {

using nb::gil_scoped_release;

std::optional<Ms> opt_ms(const std::optional<double>& seconds) {
  if (!seconds) return std::nullopt;
  return to_ms(seconds);
}

void bind_mesh(nb::module_& m) {
  using MeshPtr = std::shared_ptr<DeviceMesh>;
  auto dim_call = [](const DeviceMesh& d, nb::handle dim, auto by_int, auto by_name, auto none) {
    if (dim.is_none()) return none(d);
    if (nb::isinstance<nb::str>(dim)) return by_name(d, nb::cast<std::string>(dim));
    return by_int(d, nb::cast<int>(dim));
  };
  nb::class_<DeviceMesh>(m, "DeviceMesh")
      .def(
          "__init__",
          [](DeviceMesh* d, const std::string& device_type, std::vector<int64_t> shape,
             std::vector<std::string> names, GroupPtr group) {
            gil_scoped_release r;
            new (d) DeviceMesh(device_type, std::move(shape), std::move(names), std::move(group));
          },
          nb::arg("device_type"), nb::arg("shape"), nb::arg("dim_names"), nb::arg("group").none())
      .def_prop_ro("device_type", &DeviceMesh::device_type)
      .def_prop_ro("ndim", &DeviceMesh::ndim)
      .def_prop_ro("shape", [](const DeviceMesh& d) { return d.shape(); })
      .def_prop_ro("mesh_dim_names", [](const DeviceMesh& d) { return d.dim_names(); })
      .def_prop_ro("mesh", [](const DeviceMesh& d) { return d.mesh(); })
      .def(
          "get_group",
          [dim_call](const DeviceMesh& d, nb::handle dim) {
            return dim_call(
                d, dim, [](const DeviceMesh& x, int i) { return x.get_group(i); },
                [](const DeviceMesh& x, const std::string& n) { return x.get_group(n); },
                [](const DeviceMesh& x) { return x.get_group(); });
          },
          nb::arg("mesh_dim").none() = nb::none())
      .def(
          "size",
          [dim_call](const DeviceMesh& d, nb::handle dim) {
            return dim_call(
                d, dim, [](const DeviceMesh& x, int i) { return x.size(i); },
                [](const DeviceMesh& x, const std::string& n) { return x.size(n); },
                [](const DeviceMesh& x) { return x.size(); });
          },
          nb::arg("mesh_dim").none() = nb::none())
      .def(
          "get_local_rank",
          [dim_call](const DeviceMesh& d, nb::handle dim) {
            return dim_call(
                d, dim, [](const DeviceMesh& x, int i) { return x.get_local_rank(i); },
                [](const DeviceMesh& x, const std::string& n) { return x.get_local_rank(n); },
                [](const DeviceMesh& x) -> int64_t {
                  if (x.ndim() != 1)
                    throw InvalidArgument("DeviceMesh.get_local_rank: the mesh has " +
                                          std::to_string(x.ndim()) +
                                          " dimensions: name one (mesh_dim=...)");
                  return x.get_local_rank(0);
                });
          },
          nb::arg("mesh_dim").none() = nb::none())
      .def("get_coordinate",
           [](const DeviceMesh& d) -> nb::object {
             if (d.get_coordinate().empty()) return nb::none();
             return nb::cast(d.get_coordinate());
           })
      .def("__getitem__",
           [](const DeviceMesh& d, nb::handle names) {
             if (nb::isinstance<nb::str>(names)) return d[nb::cast<std::string>(names)];
             return d.slice(nb::cast<std::vector<std::string>>(names));
           })
      .def("__repr__", [](const DeviceMesh& d) {
        std::string s = "DeviceMesh('" + d.device_type() + "', shape (";
        for (size_t i = 0; i < d.shape().size(); ++i)
          s += (i ? ", " : "") + std::to_string(d.shape()[i]);
        return s + "))";
      });
  m.def(
      "init_device_mesh",
      [](const std::string& device_type, std::vector<int64_t> shape,
         std::vector<std::string> names) -> MeshPtr {
        gil_scoped_release r;
        return init_device_mesh(device_type, shape, names);
      },
      nb::arg("device_type"), nb::arg("mesh_shape"), nb::arg("mesh_dim_names"));
}

}  // namespace

void bind_groups(nb::module_& m) {
  nb::class_<ProcessGroup>(m, "ProcessGroup")
      .def_static(
          "create",
          [](std::shared_ptr<Store> store, int rank, int world_size, const std::string& backend,
             std::optional<double> timeout, const std::string& name) {
            InitOptions o;
            o.backend = backend;
            o.timeout = to_ms(timeout);
            o.group_name = name;
            gil_scoped_release r;
            return ProcessGroup::create(std::move(store), rank, world_size, o);
          },
          nb::arg("store"), nb::arg("rank"), nb::arg("world_size"), nb::arg("backend") = "auto",
          nb::arg("timeout").none() = nb::none(), nb::arg("group_name") = "")
      .def("rank", &ProcessGroup::rank)
      .def("size", &ProcessGroup::size)
      .def_prop_ro("is_member", &ProcessGroup::is_member)
      .def_prop_ro("backend", &ProcessGroup::backend)
      .def_prop_ro("group_name", &ProcessGroup::name)
      .def_prop_ro("timeout", [](const ProcessGroup& g) { return g.timeout().count() / 1000.0; })
      .def_prop_ro("ranks", &ProcessGroup::ranks)
      .def("group_rank", &ProcessGroup::group_rank)
      .def("global_rank", &ProcessGroup::global_rank)
      .def(
          "new_group",
          [](ProcessGroup& g, const std::vector<int>& ranks, std::optional<double> timeout,
             const std::string& backend) {
            gil_scoped_release r;
            return g.new_group(ranks, opt_ms(timeout), backend);
          },
          nb::arg("ranks"), nb::arg("timeout").none() = nb::none(), nb::arg("backend") = "")
      .def("destroy",
           [](ProcessGroup& g) {
             gil_scoped_release r;
             g.destroy();
           })
      .def("is_destroyed", &ProcessGroup::is_destroyed)
      .def("__repr__", [](const ProcessGroup& g) {
        return "<tpcomm.ProcessGroup '" + g.name() + "' rank " + std::to_string(g.rank()) + " of " +
               std::to_string(g.size()) + ", backend " + g.backend() + ">";
      });

  m.def(
      "init_process_group",
      [](const std::string& backend, const std::string& init_method, int rank, int world_size,
         std::optional<double> timeout, std::shared_ptr<Store> store,
         const std::string& group_name) {
        InitOptions o;
        o.backend = backend;
        o.init_method = init_method;
        o.rank = rank;
        o.world_size = world_size;
        o.timeout = to_ms(timeout);
        o.store = std::move(store);
        o.group_name = group_name;
        gil_scoped_release r;
        init_process_group(o);
      },
      nb::arg("backend"), nb::arg("init_method"), nb::arg("rank"), nb::arg("world_size"),
      nb::arg("timeout").none(), nb::arg("store").none(), nb::arg("group_name"));
  m.def(
      "destroy_process_group",
      [](GroupPtr g) {
        gil_scoped_release r;
        destroy_process_group(g);
      },
      nb::arg("group").none() = nb::none());
  m.def("is_initialized", &is_initialized);
  m.def("default_group", &default_group);
  m.def("is_available", &is_available);
  m.def("is_nccl_available", &is_nccl_available);
  m.def("is_gloo_available", &is_gloo_available);
  m.def("is_mpi_available", &is_mpi_available);
  m.def("is_ucx_available", &is_ucx_available);
  m.def("is_ibverbs_available", &is_ibverbs_available);
  bind_mesh(m);
}

}  // namespace tpcomm::py
