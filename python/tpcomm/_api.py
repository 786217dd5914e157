"""tensorplay.distributed's functions over tpcomm: process groups, point-to-point and every
collective. Arrays are used in place (DLPack or the buffer protocol: numpy, torch CPU
tensors, bytearray); roots and peers are global ranks unless given as group_src/group_dst/
group_peer. Blocking calls release the GIL and Ctrl-C interrupts them."""

import functools
import math

from . import _C
from ._errors import Error
from ._store import rendezvous
from ._work import Work, seconds

ProcessGroup = _C.ProcessGroup
ReduceOp = _C.ReduceOp


class Backend:
    """Backend names: auto lets the topology pick each link's transport; gloo and tpcomm
    mean auto (CPU tensors)."""

    AUTO = "auto"
    TCP = "tcp"
    SHM = "shm"
    UCX = "ucx"
    IBVERBS = "ibverbs"
    NCCL = "nccl"
    GLOO = "gloo"
    TPCOMM = "tpcomm"


class _PremulSum:
    """ReduceOp.PREMUL_SUM with its factor (each input is multiplied by it, then summed)."""

    __slots__ = ("factor",)

    def __init__(self, factor):
        self.factor = float(factor)

    def __repr__(self):
        return f"PREMUL_SUM({self.factor})"


def _make_premul_sum(factor):
    return _PremulSum(factor)


class group:  # noqa: N801 (torch's name)
    WORLD = None


GroupMember = group


def _op_args(op):
    if isinstance(op, _PremulSum):
        return ReduceOp.PREMUL_SUM, op.factor
    if not isinstance(op, ReduceOp):
        raise TypeError(f"op must be a tpcomm.ReduceOp, got {type(op).__name__}")
    if op == ReduceOp.PREMUL_SUM:
        raise ValueError("ReduceOp.PREMUL_SUM needs a factor: tpcomm._make_premul_sum(f)")
    return op, 1.0


def _api(fn):
    """Adds rank and op to tpcomm errors raised by `fn`."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Error as e:
            if e.op is None:
                e.op = fn.__name__
                try:
                    e.rank = _C.default_group().rank() if _C.is_initialized() else None
                except Exception:  # noqa: BLE001 (the original error matters)
                    e.rank = None
            raise

    return call


def _world():
    return _C.default_group()


def _g(group):
    return _world() if group is None else group


def _root(g, rank, group_rank, name):
    """The group rank of a root given as a global rank or as group_<name>."""
    if group_rank is not None:
        if rank is not None:
            raise ValueError(f"pass {name} or group_{name}, not both")
        return int(group_rank)
    if rank is None:
        raise ValueError(f"{name} is required (a global rank, or group_{name})")
    return g.group_rank(int(rank))


def _wrap(w, outputs, op):
    return None if w is None else Work(w, outputs, op)


# ---- process groups -------------------------------------------------------------------------

@_api
def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       store=None, group_name="", pg_options=None, device_id=None):
    """Starts the default group. backend: None/"auto"/"tpcomm"/"gloo" (the topology picks
    each link), "tcp", "shm", "ucx", "ibverbs", "nccl". init_method: env:// (default),
    tcp://host:port, file:///path or a registered scheme; ignored when `store` is given."""
    be = "auto" if backend in (None, "", "tpcomm", "undefined") else str(backend).lower()
    if store is None and init_method is not None:
        scheme = init_method.split("://", 1)[0]
        if scheme not in ("env", "tcp", "file"):
            store, rank, world_size = next(rendezvous(init_method, rank, world_size,
                                                      timeout=timeout))
    _C.init_process_group(be, init_method or "env://", int(rank), int(world_size),
                          seconds(timeout), store, str(group_name or ""))


@_api
def destroy_process_group(group=None):
    _C.destroy_process_group(group)


is_initialized = _C.is_initialized
is_available = _C.is_available
is_nccl_available = _C.is_nccl_available
is_gloo_available = _C.is_gloo_available
is_mpi_available = _C.is_mpi_available
is_ucx_available = _C.is_ucx_available
is_ibverbs_available = _C.is_ibverbs_available


@_api
def get_rank(group=None):
    """This process's rank in `group` (the world by default); -1 if not a member."""
    return _g(group).rank()


@_api
def get_world_size(group=None):
    g = _g(group)
    return g.size() if g.is_member else -1


@_api
def get_backend(group=None):
    return _g(group).backend


@_api
def new_group(ranks=None, timeout=None, backend=None, pg_options=None,
              use_local_synchronization=False, group_desc=None):
    """A subgroup of the world over `ranks` (None: all), sorted as torch does. Members must
    create their groups in the same order; a non-member gets a handle with rank() == -1."""
    w = _world()
    rs = list(range(w.size())) if ranks is None else sorted(int(r) for r in ranks)
    be = "" if backend in (None, "", "tpcomm") else str(backend).lower()
    return w.new_group(rs, seconds(timeout), be)


@_api
def get_group_rank(group, global_rank):
    return _g(group).group_rank(int(global_rank))


@_api
def get_global_rank(group, group_rank):
    return _g(group).global_rank(int(group_rank))


@_api
def get_process_group_ranks(group):
    return list(_g(group).ranks)


# ---- point-to-point -------------------------------------------------------------------------

@_api
def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Sends `tensor` to global rank `dst` (or group rank group_dst); returns when done."""
    g = _g(group)
    _C.send(g, tensor, _root(g, dst, group_dst, "dst"), int(tag), False)


@_api
def recv(tensor, src=None, group=None, tag=0, group_src=None):
    """Receives into `tensor` from global rank `src` (None: any rank); returns the sender's
    global rank."""
    g = _g(group)
    s = -1 if src is None and group_src is None else _root(g, src, group_src, "src")
    return g.global_rank(_C.recv(g, tensor, s, int(tag), False))


@_api
def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    g = _g(group)
    return Work(_C.send(g, tensor, _root(g, dst, group_dst, "dst"), int(tag), True), tensor,
                "isend")


@_api
def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    g = _g(group)
    s = -1 if src is None and group_src is None else _root(g, src, group_src, "src")
    return Work(_C.recv(g, tensor, s, int(tag), True), tensor, "irecv")


class P2POp:
    """One operation of batch_isend_irecv: P2POp(tpcomm.isend or tpcomm.irecv, tensor,
    peer, group=None, tag=0, group_peer=None)."""

    def __init__(self, op, tensor, peer=None, group=None, tag=0, group_peer=None):
        if op not in (isend, irecv):
            raise ValueError("P2POp: op must be tpcomm.isend or tpcomm.irecv")
        g = _g(group)
        if group_peer is not None:
            peer = g.global_rank(int(group_peer))
        if peer is None:
            raise ValueError("P2POp: peer (a global rank) or group_peer is required")
        self.op, self.tensor, self.peer, self.group, self.tag = op, tensor, int(peer), group, tag


@_api
def batch_isend_irecv(p2p_op_list):
    """Posts every operation (all checked first: none is posted if one is invalid) and
    returns their Works in order."""
    ops = list(p2p_op_list)
    if not ops:
        raise ValueError("batch_isend_irecv: the list of operations is empty")
    for o in ops:
        if not isinstance(o, P2POp):
            raise TypeError(f"batch_isend_irecv: expected P2POp, got {type(o).__name__}")
    works = _C.batch_isend_irecv([(o.op is isend, o.tensor, o.peer, o.group, int(o.tag))
                                  for o in ops])
    return [Work(w, o.tensor, o.op.__name__) for w, o in zip(works, ops)]


# ---- collectives ----------------------------------------------------------------------------

@_api
def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    g = _g(group)
    return _wrap(_C.broadcast(g, tensor, _root(g, src, group_src, "src"), async_op), tensor,
                 "broadcast")


@_api
def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    o, f = _op_args(op)
    return _wrap(_C.all_reduce(group, tensor, o, f, async_op), tensor, "all_reduce")


@_api
def all_reduce_coalesced(tensors, op=ReduceOp.SUM, group=None, async_op=False):
    """all_reduce of each tensor, issued together; one Work (the last) when async_op."""
    o, f = _op_args(op)
    works = [_C.all_reduce(group, t, o, f, True) for t in tensors]
    for w in works[:-1]:
        w.wait()
    last = Work(works[-1], list(tensors), "all_reduce_coalesced") if works else None
    if async_op:
        return last
    if last is not None:
        last.wait()
    return None


@_api
def reduce(tensor, dst=None, op=ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    g = _g(group)
    o, f = _op_args(op)
    return _wrap(_C.reduce(g, tensor, _root(g, dst, group_dst, "dst"), o, f, async_op), tensor,
                 "reduce")


@_api
def all_gather(tensor_list, tensor, group=None, async_op=False):
    return _wrap(_C.all_gather(group, tensor_list, tensor, async_op), tensor_list, "all_gather")


@_api
def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    return _wrap(_C.all_gather_into_tensor(group, output_tensor, input_tensor, async_op),
                 output_tensor, "all_gather_into_tensor")


all_gather_single = all_gather_into_tensor


@_api
def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
    g = _g(group)
    d = _root(g, 0 if dst is None and group_dst is None else dst, group_dst, "dst")
    if d == g.rank() and gather_list is None:
        raise ValueError("gather: the destination rank needs a gather_list")
    lst = gather_list if d == g.rank() else None
    return _wrap(_C.gather(g, tensor, lst, d, async_op), lst, "gather")


@_api
def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
    g = _g(group)
    s = _root(g, 0 if src is None and group_src is None else src, group_src, "src")
    if s == g.rank() and scatter_list is None:
        raise ValueError("scatter: the source rank needs a scatter_list")
    lst = scatter_list if s == g.rank() else None
    return _wrap(_C.scatter(g, tensor, lst, s, async_op), tensor, "scatter")


@_api
def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    o, f = _op_args(op)
    return _wrap(_C.reduce_scatter(group, output, input_list, o, f, async_op), output,
                 "reduce_scatter")


@_api
def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    o, f = _op_args(op)
    return _wrap(_C.reduce_scatter_tensor(group, output, input, o, f, async_op), output,
                 "reduce_scatter_tensor")


reduce_scatter_single = reduce_scatter_tensor


@_api
def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    return _wrap(_C.all_to_all(group, output_tensor_list, input_tensor_list, async_op),
                 output_tensor_list, "all_to_all")


def _row_elems(t, what):
    shape = tuple(getattr(t, "shape", ()))
    if not shape:
        raise ValueError(f"all_to_all_single: {what} needs a shape to split along dim 0")
    return math.prod(shape[1:])


@_api
def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                      group=None, async_op=False):
    """Block j of `input` (along dim 0) goes to rank j; split sizes count rows (dim 0)."""
    outs = [int(s) * _row_elems(output, "output") for s in output_split_sizes or []]
    ins = [int(s) * _row_elems(input, "input") for s in input_split_sizes or []]
    return _wrap(_C.all_to_all_single(group, output, input, outs, ins, async_op), output,
                 "all_to_all_single")


@_api
def barrier(group=None, async_op=False, device_ids=None):
    return _wrap(_C.barrier(group, async_op), None, "barrier")


_MONITORED_TAG = 0x7FFF0001


@_api
def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """A barrier through group rank 0, which names the ranks that did not arrive within
    `timeout` (default: the group's timeout): tpcomm.TimeoutError on rank 0 (the others
    time out waiting for its release). With wait_all_ranks, rank 0 lists every missing
    rank, not only the first."""
    g = _g(group)
    t = seconds(timeout)
    if t is None:
        t = g.timeout
    n, me = g.size(), g.rank()
    if n == 1:
        return
    if me != 0:
        _C.send(g, bytearray(1), 0, _MONITORED_TAG, False)
        w = Work(_C.recv(g, bytearray(1), 0, _MONITORED_TAG, True), None, "monitored_barrier")
        w.wait(t)
        return
    import time
    works = {r: Work(_C.recv(g, bytearray(1), r, _MONITORED_TAG, True), None, "")
             for r in range(1, n)}
    end = time.monotonic() + t
    missing = []
    for r, w in works.items():
        try:
            w.wait(max(0.0, end - time.monotonic()))
        except TimeoutError:
            missing.append(g.global_rank(r))
            if not wait_all_ranks:
                break
    if missing:
        from ._errors import TimeoutError as TpTimeout
        what = "rank" if len(missing) == 1 else "ranks"
        raise TpTimeout(f"monitored_barrier on group '{g.group_name}': {what} "
                        f"{', '.join(map(str, missing))} did not reach it within {t:g} s")
    for r in range(1, n):
        _C.send(g, bytearray(1), r, _MONITORED_TAG, False)
