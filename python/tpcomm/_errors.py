"""tpcomm's exceptions. Each C++ error type of the library arrives as the class of the same
name; the message names the rank, operation and peer (or key, host:port, variable) involved.
The API functions add ``rank`` (this process's global rank) and ``op`` (the function called)
as attributes."""

import builtins


class Error(RuntimeError):
    """Base of every exception tpcomm raises."""

    rank = None
    op = None


class TimeoutError(Error, builtins.TimeoutError):
    """A deadline passed: a store wait, a Work.wait, a collective."""


class StoreError(Error):
    """A key-value store failed (server unreachable, corrupt file, refused client)."""


class InvalidArgument(Error, ValueError):
    """An unusable argument: a rank out of range, wrong sizes, an unsupported dtype."""


class ConfigError(InvalidArgument):
    """A TPCOMM_* variable has a malformed value."""


class PeerError(Error):
    """A peer process failed, closed its connection, or sent something malformed."""


class TransportError(Error):
    """A transport-level failure not attributable to a peer."""


class NotSupportedError(Error):
    """The feature is not built in or not available on this machine."""


class AbortedError(Error):
    """The operation was cancelled: its group was aborted or destroyed."""


class MismatchError(Error):
    """Ranks called different collectives, or the same one with different arguments."""


# tensorplay.distributed's name for a store timeout.
StoreTimeoutError = TimeoutError

ALL = {c.__name__: c for c in (Error, TimeoutError, StoreError, InvalidArgument, ConfigError,
                               PeerError, TransportError, NotSupportedError, AbortedError,
                               MismatchError)}
for _c in ALL.values():
    _c.__module__ = "tpcomm"
