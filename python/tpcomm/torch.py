"""torch.distributed backend "tpcomm": `import tpcomm.torch`, then
`torch.distributed.init_process_group("tpcomm")`.

The backend is a Python subclass of torch's c10d Backend (no build against libtorch): each
torch group gets a tpcomm group (the world's, or a subgroup of it made with new_group over
the torch group's global ranks); torch tensors go to tpcomm as views of their memory
(data_ptr, no copy). Operations run to completion in the call (the GIL released) and return
a torch Work holding a completed Future, which is what DDP's communication hooks chain on.

Under tprun, whose launcher hosts a tpcomm store, torch's env:// rendezvous is served by a
torch Store over tpcomm's store; under torchrun torch's own store is used, and the tpcomm
world is bootstrapped through it."""

import atexit
import datetime
import os
import socket

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _Backend
from torch._C._distributed_c10d import _create_work_from_future
from torch.futures import Future

import tpcomm
from tpcomm import _C

NAME = "tpcomm"

_DTYPES = {
    torch.bool: _C.DType.bool, torch.uint8: _C.DType.uint8, torch.int8: _C.DType.int8,
    torch.int16: _C.DType.int16, torch.int32: _C.DType.int32, torch.int64: _C.DType.int64,
    torch.float16: _C.DType.float16, torch.bfloat16: _C.DType.bfloat16,
    torch.float32: _C.DType.float32, torch.float64: _C.DType.float64,
}
_OPS = {n: getattr(_C.ReduceOp, n) for n in
        ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR", "PREMUL_SUM")}


def _view(t, what):
    """A tpcomm view of a torch tensor's memory (CPU, contiguous, a tpcomm dtype)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"tpcomm backend: {what} must be a torch.Tensor, got {type(t).__name__}")
    dt = _DTYPES.get(t.dtype)
    if dt is None:
        raise tpcomm.InvalidArgument(f"tpcomm backend: {what} has dtype {t.dtype}, which "
                                     "tpcomm does not move")
    if not t.is_contiguous():
        raise tpcomm.InvalidArgument(f"tpcomm backend: {what} is not contiguous")
    if t.device.type != "cpu":
        raise tpcomm.NotSupportedError(f"tpcomm backend: {what} is on {t.device}; this "
                                       "backend takes CPU tensors")
    return _C.Tensor(t.data_ptr(), t.numel(), dt)


def _views(ts, what):
    return [_view(t, f"{what}[{i}]") for i, t in enumerate(ts)]


def _op(opts):
    red = opts.reduceOp
    name = red.op.name
    factor = 1.0
    if name == "PREMUL_SUM":
        f = red.factor if hasattr(red, "factor") else None
        factor = float(f.item() if isinstance(f, torch.Tensor) else f)
    return _OPS[name], factor


def _done(result):
    fut = Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


class TpcommBackend(_Backend):
    """torch's Backend over one tpcomm ProcessGroup (group ranks as torch passes them)."""

    def __init__(self, pg, rank, size):
        super().__init__(rank, size)
        self._pg = pg

    def getBackendName(self):  # noqa: N802 (torch's name)
        return NAME

    @property
    def tpcomm_group(self):
        return self._pg

    # -- collectives --
    def allreduce(self, tensors, opts=None):
        op, f = _op(opts or dist.AllreduceOptions())
        for v in _views(tensors, "tensors"):
            _C.all_reduce(self._pg, v, op, f, False)
        return _done(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        op, f = _op(opts or dist.AllreduceCoalescedOptions())
        works = [_C.all_reduce(self._pg, v, op, f, True) for v in _views(tensors, "tensors")]
        for w in works:
            w.wait()
        return _done(tensors)

    def broadcast(self, tensors, opts):
        for v in _views(tensors, "tensors"):
            _C.broadcast(self._pg, v, opts.rootRank, False)
        return _done(tensors)

    def reduce(self, tensors, opts):
        op, f = _op(opts)
        for v in _views(tensors, "tensors"):
            _C.reduce(self._pg, v, opts.rootRank, op, f, False)
        return _done(tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        for outs, inp in zip(output_tensors, input_tensors):
            _C.all_gather(self._pg, _views(outs, "output_tensors"), _view(inp, "input"), False)
        return _done(output_tensors)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        # output_lists[r][j]: rank r's input j.
        works = [_C.all_gather(self._pg, _views([outs[j] for outs in output_lists],
                                                 "output_lists"), _view(inp, "input"), True)
                 for j, inp in enumerate(input_list)]
        for w in works:
            w.wait()
        return _done(output_lists)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        works = [_C.all_gather_into_tensor(self._pg, _view(o, "output"), _view(i, "input"), True)
                 for o, i in zip(outputs, inputs)]
        for w in works:
            w.wait()
        return _done(outputs)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def _allgather_base(self, output, input, opts=None):
        _C.all_gather_into_tensor(self._pg, _view(output, "output"), _view(input, "input"),
                                  False)
        return _done([output])

    all_gather_single = _allgather_base

    def gather(self, output_tensors, input_tensors, opts):
        outs = output_tensors[0] if output_tensors else []
        _C.gather(self._pg, _view(input_tensors[0], "input"), _views(outs, "output_tensors"),
                  opts.rootRank, False)
        return _done(output_tensors)

    def scatter(self, output_tensors, input_tensors, opts):
        ins = input_tensors[0] if input_tensors else []
        _C.scatter(self._pg, _view(output_tensors[0], "output"), _views(ins, "input_tensors"),
                   opts.rootRank, False)
        return _done(output_tensors)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op, f = _op(opts or dist.ReduceScatterOptions())
        for out, ins in zip(output_tensors, input_tensors):
            _C.reduce_scatter(self._pg, _view(out, "output"), _views(ins, "input_list"), op, f,
                              False)
        return _done(output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):
        op, f = _op(opts or dist.ReduceScatterOptions())
        _C.reduce_scatter_tensor(self._pg, _view(output, "output"), _view(input, "input"), op,
                                 f, False)
        return _done([output])

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        op, f = _op(opts or dist.ReduceScatterOptions())
        works = [_C.reduce_scatter_tensor(self._pg, _view(o, "output"), _view(i, "input"), op, f,
                                          True) for o, i in zip(outputs, inputs)]
        for w in works:
            w.wait()
        return _done(outputs)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        row_out = output.numel() // output.shape[0] if output.dim() and output.shape[0] else 0
        row_in = input.numel() // input.shape[0] if input.dim() and input.shape[0] else 0
        _C.all_to_all_single(self._pg, _view(output, "output"), _view(input, "input"),
                             [int(s) * row_out for s in output_split_sizes],
                             [int(s) * row_in for s in input_split_sizes], False)
        return _done([output])

    all_to_all_single = alltoall_base

    def alltoall(self, output_tensors, input_tensors, opts=None):
        _C.all_to_all(self._pg, _views(output_tensors, "output_tensors"),
                      _views(input_tensors, "input_tensors"), False)
        return _done(output_tensors)

    def barrier(self, opts=None):
        _C.barrier(self._pg, False)
        return _done([])

    # -- point-to-point (group ranks) --
    def send(self, tensors, dst, tag):
        for v in _views(tensors, "tensors"):
            _C.send(self._pg, v, dst, tag, False)
        return _done(tensors)

    def recv(self, tensors, src, tag):
        for v in _views(tensors, "tensors"):
            _C.recv(self._pg, v, src, tag, False)
        return _done(tensors)

    def recv_anysource(self, tensors, tag):
        # torch reads the sender through Work.sourceRank(), which a Python backend's Work
        # cannot provide: refuse before anything is received.
        raise tpcomm.NotSupportedError(
            "tpcomm backend: torch.distributed.recv without src needs the sender's rank from "
            "the Work, which torch does not take from a Python backend; pass src (or use "
            "tpcomm.recv, which returns it)")


class TorchStore(dist.Store):
    """torch's Store interface over a tpcomm store (what env:// returns under tprun)."""

    def __init__(self, store):
        super().__init__()
        self._s = store

    def set(self, key, value):
        self._s.set(key, value)

    def get(self, key):
        return self._s.get(key)

    def add(self, key, value):
        return self._s.add(key, value)

    def compare_set(self, key, expected, desired):
        return self._s.compare_set(key, expected, desired)

    def delete_key(self, key):
        return self._s.delete_key(key)

    def num_keys(self):
        return self._s.num_keys()

    def check(self, keys):
        return self._s.check(list(keys))

    def wait(self, keys, timeout=None):
        t = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
        self._s.wait(list(keys), t)

    def set_timeout(self, timeout):
        self._s.set_timeout(timeout.total_seconds())

    def append(self, key, value):
        self._s.append(key, value)

    def multi_get(self, keys):
        return self._s.multi_get(list(keys))

    def multi_set(self, keys, values):
        self._s.multi_set(list(keys), list(values))


_state = {"world": None, "stores": []}


def _bootstrap(store, rank, size, timeout):
    """A tpcomm store for the world: rank 0 serves one and publishes its address in torch's
    store (the torch store may be one tpcomm cannot speak)."""
    key = "tpcomm/store_address"
    if rank == 0:
        host = os.environ.get("MASTER_ADDR") or socket.gethostname()
        s = tpcomm.TCPStore(host, 0, size, True, timeout, wait_for_workers=False)
        store.set(key, f"{host}:{s.port}")
        return s
    host, port = store.get(key).decode().rsplit(":", 1)
    return tpcomm.TCPStore(host, int(port), size, False, timeout)


def _create(opts, pg_options=None):
    timeout = opts.timeout.total_seconds()
    ranks = list(opts.global_ranks_in_group)
    world = _state["world"]
    if not dist.is_initialized() or world is None or world.is_destroyed():
        if world is not None and not world.is_destroyed():
            world.destroy()
        store = _bootstrap(opts.store, opts.group_rank, opts.group_size, timeout)
        world = _C.ProcessGroup.create(store, opts.group_rank, opts.group_size, "auto",
                                       timeout, "")
        _state["world"] = world
        pg = world
    else:
        pg = world.new_group(sorted(ranks) if ranks else list(range(world.size())), timeout,
                             "")
    return TpcommBackend(pg, opts.group_rank, opts.group_size)


@atexit.register
def _destroy_world():
    world = _state["world"]
    if world is not None and not world.is_destroyed():
        world.destroy()


def _install_env_handler():
    """Under tprun (TPCOMM_USE_AGENT_STORE), env:// meets at the launcher's tpcomm store."""
    import importlib

    rdzv = importlib.import_module("torch.distributed.rendezvous")

    original = rdzv._rendezvous_handlers.get("env")
    if original is None or getattr(original, "_tpcomm", False):
        return

    def handler(url, timeout=datetime.timedelta(seconds=300), **kwargs):
        if not _C.config_bool("TPCOMM_USE_AGENT_STORE"):
            yield from original(url, timeout=timeout, **kwargs)
            return
        store, rank, size = next(tpcomm.rendezvous(url, timeout=timeout))
        ts = TorchStore(store)
        # torch holds only the C++ side; its Python methods must outlive the group.
        _state["stores"].append(ts)
        yield ts, rank, size

    handler._tpcomm = True
    rdzv._rendezvous_handlers["env"] = handler


if NAME not in dist.Backend.backend_list:
    dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu"])
_install_env_handler()
