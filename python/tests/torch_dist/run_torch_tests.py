"""Runs a named selection of torch's own distributed tests
(torch/testing/_internal/distributed/distributed_test.py) against a backend, each case
spawning WORLD_SIZE processes as torch's harness does.

    BACKEND=tpcomm|gloo WORLD_SIZE=4 python run_torch_tests.py [--cases FILE] [NAME...]

TORCH_TESTS_START=spawn starts each rank as a fresh interpreter instead of a fork.

The case list (cases.txt beside this file) names one test per line; '#' starts a comment.
Every listed case must pass: a case torch skips counts as a failure (the list holds only
cases that run). Prints one line per case and a summary; exits 1 on any failure."""

import argparse
import os
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def _setup_env():
    # Read at import by torch's test module (and inherited by the spawned ranks).
    os.environ.setdefault("BACKEND", "tpcomm")
    os.environ.setdefault("WORLD_SIZE", "4")
    os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="tpcomm_torch_tests_"))
    os.environ.setdefault("OMP_NUM_THREADS", "1")


_setup_env()
BACKEND = os.environ["BACKEND"]
if BACKEND == "tpcomm":
    import tpcomm.torch  # noqa: F401 (registers the backend in every rank)
    from torch.testing._internal.common_distributed import DistTestCases

    for feature in ("plugin", "ddp", "subgroup"):
        DistTestCases.backend_feature[feature].add("tpcomm")

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


START = os.environ.get("TORCH_TESTS_START", "fork")


class TestTorchSuite(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        if START == "spawn":
            self._spawn_processes()
        else:
            # The ranks inherit this interpreter, torch already imported: a few seconds less
            # per case than spawn's fresh interpreters. Nothing here has started a process
            # group (no tpcomm or gloo threads exist to be forked).
            import torch.multiprocessing as mp

            self._start_processes(mp.get_context("fork").Process)


def read_cases(path):
    cases = []
    with open(path) as f:
        for line in f:
            name = line.split("#", 1)[0].strip()
            if name:
                cases.append(name)
    return cases


class Result(unittest.TextTestResult):
    def startTest(self, test):
        self._t0 = time.monotonic()
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        test._elapsed = time.monotonic() - self._t0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=os.path.join(HERE, "cases.txt"))
    p.add_argument("names", nargs="*", help="run these cases instead of the list")
    args = p.parse_args()
    names = args.names or read_cases(args.cases)
    missing = [n for n in names if not hasattr(TestTorchSuite, n)]
    if missing:
        print(f"unknown test names: {', '.join(missing)}", file=sys.stderr)
        return 2
    suite = unittest.TestSuite(TestTorchSuite(n) for n in names)
    start = time.monotonic()
    res = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, resultclass=Result).run(suite)
    bad = len(res.failures) + len(res.errors) + len(res.skipped) + len(res.unexpectedSuccesses)
    print(f"torch distributed_test.py, backend {BACKEND}, world size "
          f"{os.environ['WORLD_SIZE']}: {res.testsRun - bad} of {len(names)} passed, "
          f"{len(res.failures) + len(res.errors)} failed, {len(res.skipped)} skipped "
          f"({time.monotonic() - start:.0f} s)")
    for t, why in res.skipped:
        print(f"SKIPPED (counts as a failure): {t.id().rsplit('.', 1)[-1]}: {why}")
    return 0 if bad == 0 and res.testsRun == len(names) else 1


if __name__ == "__main__":
    sys.exit(main())
