"""In one process: errors, array conversion, stores, rendezvous, info(), a world of one."""

import builtins
import os

import numpy as np
import pytest

import tpcomm

DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32,
          np.float64]


def test_error_hierarchy():
    assert issubclass(tpcomm.TimeoutError, tpcomm.Error)
    assert issubclass(tpcomm.TimeoutError, builtins.TimeoutError)
    assert issubclass(tpcomm.InvalidArgument, ValueError)
    assert issubclass(tpcomm.ConfigError, tpcomm.InvalidArgument)
    assert issubclass(tpcomm.Error, RuntimeError)
    assert tpcomm.StoreTimeoutError is tpcomm.TimeoutError


@pytest.mark.parametrize("dtype", DTYPES)
def test_view_of_each_dtype_is_in_place(dtype):
    a = np.zeros(5, dtype=dtype)
    addr, numel, dt = tpcomm._C._view(a)
    assert addr == a.ctypes.data and numel == 5 and dt.name == np.dtype(dtype).name


def test_view_errors():
    with pytest.raises(tpcomm.InvalidArgument, match="not contiguous"):
        tpcomm._C._view(np.zeros((4, 4))[:, 1])
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(tpcomm.InvalidArgument, match="read-only"):
        tpcomm._C._view(ro)
    assert tpcomm._C._view(ro, False)[1] == 3  # an input may be read-only
    with pytest.raises(tpcomm.InvalidArgument, match="complex64"):
        tpcomm._C._view(np.zeros(2, dtype=np.complex64))
    with pytest.raises(tpcomm.InvalidArgument, match="uint16"):
        tpcomm._C._view(np.zeros(2, dtype=np.uint16))
    with pytest.raises(tpcomm.InvalidArgument, match="expected an array"):
        tpcomm._C._view([1.0, 2.0])
    assert tpcomm._C._view(bytearray(7))[1] == 7


def test_not_initialized():
    assert not tpcomm.is_initialized()
    with pytest.raises(tpcomm.InvalidArgument) as e:
        tpcomm.get_rank()
    assert e.value.op == "get_rank"
    with pytest.raises(tpcomm.InvalidArgument):
        tpcomm.all_reduce(np.zeros(1))


def _exercise_store(s):
    s.set("a", "1")
    s.set("b", b"\x00\xff")
    assert s.get("a") == b"1" and s.get("b") == b"\x00\xff"
    assert s.add("n", 5) == 5 and s.add("n", -2) == 3 and s.get("n") == b"3"
    assert s.compare_set("a", "1", "2") == b"2"
    assert s.compare_set("a", "x", "3") == b"2"
    assert s.check(["a", "b"]) and not s.check(["a", "zz"])
    s.append("c", "x")
    s.append("c", "y")
    assert s.get("c") == b"xy"
    s.multi_set(["m1", "m2"], ["p", b"q"])
    assert s.multi_get(["m1", "m2"]) == [b"p", b"q"]
    assert s.delete_key("m1") and not s.delete_key("m1")
    with pytest.raises(tpcomm.TimeoutError, match="missing"):
        s.wait(["missing"], 0.05)
    with pytest.raises(tpcomm.TimeoutError):
        s.get("missing", timeout=0.05)
    with pytest.raises(tpcomm.InvalidArgument):
        s.set("k", 3)


def test_stores(tmp_path):
    _exercise_store(tpcomm.HashStore())
    _exercise_store(tpcomm.FileStore(str(tmp_path / "fs"), 1))
    t = tpcomm.TCPStore("127.0.0.1", 0, 1, True, 10)
    assert t.port > 0
    _exercise_store(t)
    client = tpcomm.TCPStore("127.0.0.1", t.port, timeout=10)
    assert client.get("a") == b"2"
    base = tpcomm.HashStore()
    p = tpcomm.PrefixStore("job", base)
    _exercise_store(p)
    assert base.get("job/a") == b"2"
    assert base.num_keys() == p.num_keys()


def test_store_errors():
    with pytest.raises(tpcomm.InvalidArgument, match="port"):
        tpcomm.TCPStore("127.0.0.1", 70000)
    with pytest.raises(tpcomm.TimeoutError, match="cannot reach 127.0.0.1:1"):
        tpcomm.TCPStore("127.0.0.1", 1, timeout=0.5)  # nothing listens on port 1


def test_rendezvous(tmp_path):
    url = f"file://{tmp_path}/rdzv?rank=0&world_size=1"
    store, rank, world = next(tpcomm.rendezvous(url))
    assert (rank, world) == (0, 1)
    store.set("k", "v")
    assert store.get("k") == b"v"
    with pytest.raises(tpcomm.InvalidArgument):
        next(tpcomm.rendezvous("bogus://x"))
    tpcomm.register_rendezvous_handler(
        "mine", lambda url, **kw: (tpcomm.HashStore(), 0, 1))
    store, rank, world = next(tpcomm.rendezvous("mine://anything"))
    assert isinstance(store, tpcomm.HashStore) and (rank, world) == (0, 1)
    with pytest.raises(ValueError, match="already registered"):
        tpcomm.register_rendezvous_handler("mine", lambda url, **kw: None)


def test_info():
    d = tpcomm.info()
    names = {v["name"] for v in d["variables"]}
    assert "TPCOMM_TIMEOUT" in names
    assert d["version"].startswith("0.")
    assert {t["name"] for t in d["transports"]} >= {"tcp", "shm"}
    assert "topology" in d and isinstance(d["warnings"], list)
    assert "links" not in d  # no process group


def test_world_of_one():
    tpcomm.init_process_group(store=tpcomm.HashStore(), rank=0, world_size=1)
    try:
        assert tpcomm.is_initialized() and tpcomm.get_rank() == 0
        assert tpcomm.get_world_size() == 1
        a = np.arange(4, dtype=np.float32)
        tpcomm.all_reduce(a)
        assert a.tolist() == [0, 1, 2, 3]
        out = [None]
        tpcomm.all_gather_object(out, {"x": (1, [2])})
        assert out == [{"x": (1, [2])}]
        assert tpcomm.info()["process_group"]["world_size"] == 1
        with pytest.raises(tpcomm.Error):
            tpcomm.init_process_group(store=tpcomm.HashStore(), rank=0, world_size=1)
    finally:
        tpcomm.destroy_process_group()
    assert not tpcomm.is_initialized()
