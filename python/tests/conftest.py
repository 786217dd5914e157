"""The multi-process harness of the Python tier: run_ranks(n, fn) starts n interpreters,
each running fn(rank, world_size) of the calling test module after init_process_group
(env:// against a store this process serves, as under tprun), and returns their outputs.
Every process is reaped; a job past its timeout is killed and fails the test."""

import json
import os
import subprocess
import sys

import pytest

import tpcomm

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class Job:
    def __init__(self, outputs, codes):
        self.outputs = outputs
        self.codes = codes


def run_ranks(n, fn, *args, timeout=90, init=True, env=None, expect_ok=True):
    store = tpcomm.TCPStore("127.0.0.1", 0, n, True, timeout, wait_for_workers=False)
    base = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port),
                WORLD_SIZE=str(n), TPCOMM_USE_AGENT_STORE="1", TPCOMM_TIMEOUT="60s",
                PYTHONUNBUFFERED="1")
    base.update(env or {})
    module = sys.modules[fn.__module__].__file__
    procs = []
    for r in range(n):
        e = dict(base, RANK=str(r), LOCAL_RANK=str(r))
        cmd = [sys.executable, os.path.join(HERE, "_worker.py"), module, fn.__name__,
               json.dumps(list(args)), "1" if init else "0"]
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs, codes = [], []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            outputs.append(out)
            codes.append(p.returncode)
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        for p in procs:
            p.communicate()
        pytest.fail(f"{fn.__name__}: the {n}-rank job did not finish within {timeout} s")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if expect_ok:
        for r, (c, out) in enumerate(zip(codes, outputs)):
            assert c == 0, f"{fn.__name__}: rank {r} exited {c}:\n{out}"
    return Job(outputs, codes)


@pytest.fixture
def ranks():
    return run_ranks
