"""Object collectives: Python objects are pickled (as tensorplay and torch do: only unpickle
what your own job sent), moved as bytes by the C++ object collectives (sizes first, then one
payload), and unpickled in place into the caller's lists."""

import io
import pickle

from . import _C
from ._api import _api, _g
from ._errors import MismatchError


def _dump(obj):
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _load(b):
    return pickle.load(io.BytesIO(b))


def _check_len(lst, n, what):
    if not isinstance(lst, list) or len(lst) != n:
        got = f"a list of {len(lst)}" if isinstance(lst, list) else type(lst).__name__
        raise ValueError(f"{what} must be a list of {n} (the group size), got {got}")


@_api
def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
    """Copies `object_list` of rank `src` (global; default 0) into every rank's list."""
    g = _g(group)
    s = g.global_rank(int(group_src)) if group_src is not None else (0 if src is None else src)
    mine = g.global_rank(g.rank()) == s
    out = _C.broadcast_object_list([_dump(o) for o in object_list] if mine else None, int(s),
                                   group)
    if not mine:
        object_list[:] = [_load(b) for b in out]
    return object_list


@_api
def all_gather_object(object_list, obj, group=None):
    """object_list[i] = group rank i's `obj` (object_list has the group's size)."""
    g = _g(group)
    _check_len(object_list, g.size(), "all_gather_object: object_list")
    object_list[:] = [_load(b) for b in _C.all_gather_object(_dump(obj), group)]


@_api
def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
    """On `dst` (global; default 0), object_gather_list[i] = group rank i's `obj`."""
    g = _g(group)
    d = g.global_rank(int(group_dst)) if group_dst is not None else (0 if dst is None else dst)
    is_dst = g.global_rank(g.rank()) == d
    if is_dst:
        _check_len(object_gather_list, g.size(), "gather_object: object_gather_list")
    out = _C.gather_object(_dump(obj), int(d), is_dst, group)
    if is_dst:
        object_gather_list[:] = [_load(b) for b in out]


@_api
def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None,
                        group=None, group_src=None):
    """scatter_object_output_list[0] = the source's scatter_object_input_list[group rank]."""
    g = _g(group)
    s = g.global_rank(int(group_src)) if group_src is not None else (0 if src is None else src)
    if not isinstance(scatter_object_output_list, list) or not scatter_object_output_list:
        raise ValueError("scatter_object_list: scatter_object_output_list must be a list with "
                         "at least one element")
    mine = g.global_rank(g.rank()) == s
    if mine:
        _check_len(scatter_object_input_list, g.size(),
                   "scatter_object_list: scatter_object_input_list")
    ins = [_dump(o) for o in scatter_object_input_list] if mine else None
    scatter_object_output_list[0] = _load(_C.scatter_object_list(ins, int(s), group))


@_api
def send_object_list(object_list, dst=None, group=None, device=None, group_dst=None):
    g = _g(group)
    d = g.global_rank(int(group_dst)) if group_dst is not None else dst
    if d is None:
        raise ValueError("send_object_list: dst is required")
    _C.send_object_list([_dump(o) for o in object_list], int(d), group)


@_api
def recv_object_list(object_list, src=None, group=None, device=None, group_src=None):
    """Fills `object_list` with the objects sent by `src` (None: any rank); returns the
    sender's global rank."""
    g = _g(group)
    s = g.global_rank(int(group_src)) if group_src is not None else (-1 if src is None else src)
    objs, sender = _C.recv_object_list(int(s), group)
    object_list[:] = [_load(b) for b in objs]
    return sender


def _type_name(obj):
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


@_api
def all_gather_object_enforce_type(pg, object_list, obj, type_checker=None):
    """all_gather_object, then TypeError on every rank when some rank's object has another
    type than rank 0's. The default check compares type names (module.qualname) inside the
    gather; a custom type_checker(a, b) -> bool is applied to the gathered objects."""
    g = _g(pg)
    _check_len(object_list, g.size(), "all_gather_object_enforce_type: object_list")
    if type_checker is None:
        try:
            out = _C.all_gather_object_enforce_type(pg, _type_name(obj), _dump(obj))
        except MismatchError as e:
            raise TypeError(str(e)) from e
        object_list[:] = [_load(b) for b in out]
        return
    all_gather_object(object_list, obj, pg)
    bad = [i for i, o in enumerate(object_list) if not type_checker(object_list[0], o)]
    if bad:
        desc = ", ".join(f"rank {i}: {_type_name(object_list[i])}" for i in bad)
        raise TypeError(f"all_gather_object_enforce_type: objects differ in type from rank "
                        f"0's {_type_name(object_list[0])}: {desc}")
