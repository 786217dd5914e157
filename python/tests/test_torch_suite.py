"""torch's own distributed_test.py against backend tpcomm: the named cases of
torch_dist/cases.txt, each of which gloo also passes (torch_dist/skipped.md: the others)."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_torch_distributed_test_selection():
    env = dict(os.environ, BACKEND="tpcomm", WORLD_SIZE="4")
    p = subprocess.run([sys.executable, os.path.join(HERE, "torch_dist", "run_torch_tests.py")],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600)
    summary = [line for line in p.stdout.splitlines() if "distributed_test.py, backend" in line]
    assert p.returncode == 0 and summary, p.stdout[-20000:]
    with open(os.path.join(HERE, "torch_dist", "cases.txt")) as f:
        n = sum(1 for line in f if line.split("#", 1)[0].strip())
    assert f"{n} of {n} passed" in summary[0], summary[0]
    print(summary[0])
