"""Key-value stores and rendezvous, with tensorplay.distributed's constructor arguments
(timeouts as timedelta or seconds)."""

import datetime
import urllib.parse

from . import _C
from ._work import seconds

Store = _C.Store
_DEFAULT = 300.0


def _timeout(t):
    s = seconds(t)
    return _DEFAULT if s is None else s


class TCPStore(_C.TCPStore):
    """A store served over TCP by the master (port 0: a free port, read back as .port)."""

    def __init__(self, host_name, port=0, world_size=None, is_master=False,
                 timeout=datetime.timedelta(seconds=300), wait_for_workers=True, **_torch_only):
        super().__init__(host_name, int(port), -1 if world_size is None else int(world_size),
                         bool(is_master), _timeout(timeout), bool(wait_for_workers))


class FileStore(_C.FileStore):
    """A store kept in one file (shared by the processes of a host or a shared file system)."""

    def __init__(self, file_name, world_size=-1):
        super().__init__(str(file_name), int(world_size))


class HashStore(_C.HashStore):
    """A store inside this process (threads, tests)."""


class PrefixStore(_C.PrefixStore):
    """A view of `store` whose keys are prefixed with "<prefix>/"."""

    def __init__(self, prefix, store):
        super().__init__(str(prefix), store)


_handlers = {}


def register_rendezvous_handler(scheme, handler):
    """Registers `handler(url, **kwargs)` for URLs of `scheme`; it returns (or yields)
    (store, rank, world_size). A scheme is registered once (ValueError otherwise), as in
    tensorplay; env, tcp and file are built in."""
    if scheme in _handlers or scheme in ("env", "tcp", "file"):
        raise ValueError(f"rendezvous handler for {scheme}:// already registered")
    _handlers[scheme] = handler


def rendezvous(url, rank=-1, world_size=-1, timeout=None, **kwargs):
    """A generator of one (store, rank, world_size) for `url` (env://, tcp://host:port,
    file:///path, or a registered scheme), as tensorplay's."""
    if not isinstance(url, str):
        raise TypeError(f"rendezvous: url must be a str, got {type(url).__name__}")
    scheme = urllib.parse.urlparse(url).scheme
    if scheme in _handlers:
        res = _handlers[scheme](url, rank=rank, world_size=world_size, timeout=timeout, **kwargs)
        if isinstance(res, tuple):
            yield res
        else:
            yield from res
        return
    yield _C.rendezvous(url, int(rank), int(world_size), _timeout(timeout))
