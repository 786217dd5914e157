// tpcomm.info(): tpinfo's report (topology, transports, NIC choices with reasons, every
// TPCOMM_* variable) as JSON, plus the transport chosen for each peer of the world group and
// why, when one is initialized.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "common.h"
#include "core/config.h"
#include "pg/group_state.h"
#include "tpinfo/report.h"

namespace tpcomm::py {

void bind_extras(nb::module_& m) {
  m.def("info_json", [] {
    nb::gil_scoped_release r;
    tpinfo::Inputs in;
    in.topology = topo::load_configured();
    in.transports = topo::probe_transports();
    in.nic_options = topo::NicOptions::from_config();
    return tpinfo::json_report(in);
  });
  m.def("config_warnings", [] { return config::validate(); });
  m.def("config_bool", [](const std::string& name) { return config::get_bool(name); });
  m.def("links", [] {
    // (peer, transport, reason) for every other rank of the world group (connects).
    nb::list out;
    if (!is_initialized()) return out;
    GroupPtr g = default_group();
    auto& state = g->state();
    auto& engine = *state.world->engine;
    for (int p = 0; p < g->size(); ++p) {
      if (p == g->rank()) continue;
      p2p::Engine::LinkDescription d;
      {
        nb::gil_scoped_release r;
        d = engine.describe_link(state.info.backend, p);
      }
      out.append(nb::make_tuple(p, d.transport, d.reason));
    }
    return out;
  });
}

}  // namespace tpcomm::py
