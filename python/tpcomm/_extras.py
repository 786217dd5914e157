"""DeviceMesh, model averaging and tpcomm.info()."""

import json

from . import _C
from ._api import _api

DeviceMesh = _C.DeviceMesh


@_api
def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None):
    """A DeviceMesh over the world laid out in `mesh_shape` (row-major); its per-dimension
    subgroups are made now, by every rank."""
    return _C.init_device_mesh(str(device_type), [int(s) for s in mesh_shape],
                               list(mesh_dim_names or []))


def _data(p):
    # A torch Parameter: its data (same memory, no autograd); arrays as they are.
    return p.detach() if hasattr(p, "detach") else p


def get_params_to_average(params):
    """The parameters worth averaging: those with a gradient (objects without a .grad
    attribute, such as numpy arrays, count as having one). Takes parameters or an
    optimizer's param_groups (dicts with "params")."""
    out = []
    for p in params:
        if isinstance(p, dict):
            out.extend(q for q in p["params"] if getattr(q, "grad", True) is not None)
        elif getattr(p, "grad", True) is not None:
            out.append(p)
    return out


@_api
def average_parameters(params, process_group=None):
    """Replaces each parameter by its average over the group, in place: one all_reduce per
    dtype over all of them, not one per tensor."""
    _C.average_parameters([_data(p) for p in params], process_group)


def average_parameters_or_parameter_groups(params, process_group=None):
    average_parameters(get_params_to_average(params), process_group)


def info():
    """What tpinfo reports, as Python data: the topology, the transports (built, usable,
    why), the NIC choices and their reasons, every TPCOMM_* variable with its value, default
    and meaning, warnings about malformed settings; with a process group initialized, also
    the transport chosen for each peer and why ("links")."""
    d = json.loads(_C.info_json())
    d["warnings"] = list(_C.config_warnings())
    if _C.is_initialized():
        g = _C.default_group()
        d["process_group"] = {"rank": g.rank(), "world_size": g.size(), "backend": g.backend,
                              "group_name": g.group_name}
        d["links"] = [{"peer": p, "transport": t, "reason": r} for p, t, r in _C.links()]
    return d
