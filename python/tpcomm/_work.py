"""Work and Future: the handles of asynchronous operations (async_op=True, isend/irecv,
batch_isend_irecv)."""

import datetime

from . import _C


def seconds(timeout):
    """A timeout given as a timedelta or as seconds, in seconds (None stays None)."""
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout)


class Work:
    """An operation in flight. wait() blocks (Ctrl-C interrupts it) and raises the
    operation's error; get_future() gives a Future of the operation's output arrays."""

    __slots__ = ("_w", "_outputs", "_op", "_src_global")

    def __init__(self, w, outputs=None, op=""):
        self._w = w
        self._outputs = outputs
        self._op = op
        self._src_global = None

    def wait(self, timeout=None):
        """Blocks until done or `timeout` (timedelta or seconds; None: the operation's own
        deadline) passes, which raises tpcomm.TimeoutError. Returns True."""
        return self._w.wait(seconds(timeout))

    def is_completed(self):
        return self._w.is_completed()

    def is_success(self):
        return self._w.is_success()

    def exception(self):
        """The operation's error (an exception object), or None."""
        return self._w.exception()

    def result(self):
        """The output arrays (a list), after wait()."""
        out = self._outputs
        if out is None:
            return []
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def source_rank(self):
        """For a receive: the sender's global rank (-1 before completion)."""
        r = self._w._source_group_rank()
        if r < 0:
            return -1
        return self._w.group.global_rank(r)

    _source_rank = source_rank

    def get_future(self):
        return Future(self)

    def __repr__(self):
        state = "completed" if self._w.is_completed() else "pending"
        return f"<tpcomm.Work {self._op} {state}>"


class Future:
    """The result of a Work: wait()/value() give its output arrays. then(fn) chains a
    callback, run in the thread that waits for the chained Future (tpcomm has no thread of
    its own running Python code)."""

    def __init__(self, work=None, parent=None, fn=None):
        self._work = work
        self._parent = parent
        self._fn = fn
        self._done = False
        self._value = None
        self._error = None

    def done(self):
        if self._done:
            return True
        if self._work is not None:
            return self._work.is_completed()
        return self._parent.done()

    def wait(self):
        if not self._done:
            try:
                if self._work is not None:
                    self._work.wait()
                    self._value = self._work.result()
                else:
                    self._parent.wait()
                    self._value = self._fn(self._parent)
            except BaseException as e:  # kept, and raised again by every later wait()
                self._error = e
            self._done = True
        if self._error is not None:
            raise self._error
        return self._value

    value = wait

    def then(self, callback):
        return Future(parent=self, fn=callback)
