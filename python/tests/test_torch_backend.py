"""tpcomm.torch: torch.distributed with backend "tpcomm" under torchrun and tprun, and DDP
training that gives bit-identical losses and parameters with tpcomm and with gloo."""

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
TPRUN = os.environ.get("TPRUN") or os.path.join(ROOT, "build-test", "bin", "tprun")


def _run(cmd, timeout=240):
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}"
    return p.stdout


def _final(out):
    m = re.search(r"final loss (\S+) \((\S+)\) parameters sha256 (\w+)", out)
    assert m, out
    return m.groups()


@pytest.mark.parametrize("bucket_mb", ["25", "0.005"])
def test_ddp_tpcomm_equals_gloo_bit_for_bit(bucket_mb):
    results = {}
    for backend in ("gloo", "tpcomm"):
        out = _run([TORCHRUN, "--standalone", "--nproc-per-node", "2",
                    os.path.join(ROOT, "examples", "ddp_train.py"), "--backend", backend,
                    "--steps", "200", "--bucket-cap-mb", bucket_mb])
        results[backend] = _final(out)
        if bucket_mb != "25":
            assert re.search(r"buckets [2-9]", out), out  # the gradients were split
    assert results["tpcomm"] == results["gloo"]


SCRIPT = r"""
import torch, torch.distributed as dist
import tpcomm.torch
dist.init_process_group("tpcomm")
r, n = dist.get_rank(), dist.get_world_size()
t = torch.full((4,), float(r + 1)); dist.all_reduce(t)
assert t.tolist() == [n * (n + 1) / 2] * 4, t
i = torch.arange(3) * (r + 1); dist.all_reduce(i, op=dist.ReduceOp.MAX)
assert i.tolist() == [0, n, 2 * n]
outs = [torch.zeros(2) for _ in range(n)]; dist.all_gather(outs, torch.full((2,), float(r)))
assert [o[0].item() for o in outs] == list(range(n))
flat = torch.zeros(2 * n); dist.all_gather_into_tensor(flat, torch.full((2,), float(r)))
assert flat.tolist() == [float(q) for q in range(n) for _ in range(2)]
rs = torch.zeros(2); dist.reduce_scatter_tensor(rs, torch.arange(2. * n))
assert rs.tolist() == [n * 2. * r, n * (2. * r + 1)]
b = torch.full((3,), float(r)); dist.broadcast(b, src=n - 1); assert b.tolist() == [n - 1.] * 3
a2a = torch.zeros(n); dist.all_to_all_single(a2a, torch.full((n,), float(r)))
assert a2a.tolist() == [float(q) for q in range(n)]
if r == 0:
    dist.send(torch.ones(2), 1)
elif r == 1:
    x = torch.zeros(2); dist.recv(x, 0); assert x.tolist() == [1., 1.]
g = dist.new_group([0, 1])
if r < 2:
    s = torch.ones(1); dist.all_reduce(s, group=g); assert s.item() == 2
objs = [None] * n; dist.all_gather_object(objs, {"r": r}); assert objs == [{"r": q} for q in range(n)]
w = dist.all_reduce(torch.ones(1), async_op=True)
assert w.get_future().wait()[0].item() == n
dist.barrier()
import os
os.write(1, f"rank {r} backend {dist.get_backend()} ok\n".encode())  # one write: no interleaving
dist.destroy_process_group()
"""


def _script(tmp_path):
    p = tmp_path / "backend_check.py"
    p.write_text(SCRIPT)
    return str(p)


def test_backend_under_torchrun(tmp_path):
    out = _run([TORCHRUN, "--standalone", "--nproc-per-node", "3", _script(tmp_path)])
    assert out.count("backend tpcomm ok") == 3, out


def test_backend_under_tprun(tmp_path):
    if not os.access(TPRUN, os.X_OK):
        pytest.skip(f"no tprun at {TPRUN} (build the C++ tree, or set TPRUN)")
    out = _run([TPRUN, "--nproc-per-node", "2", sys.executable, _script(tmp_path)])
    assert out.count("backend tpcomm ok") == 2, out
