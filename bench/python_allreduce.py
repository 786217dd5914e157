"""Latency of a 2-rank 8-byte all_reduce from Python, three ways in one job: tpcomm's own
API, torch.distributed with backend tpcomm, and torch.distributed with gloo. Rounds of each
alternate (so load drifting on a shared machine hits all three alike); the median round of
each is reported.

    torchrun --standalone --nproc-per-node 2 bench/python_allreduce.py [--iters N --rounds R]
    build-test/bin/tprun --nproc-per-node 2 python bench/python_allreduce.py"""

import argparse
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist

import tpcomm
import tpcomm.torch  # noqa: F401 (registers the backend)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=2000, help="all_reduces per round")
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("tpcomm")
    gloo = dist.new_group(backend="gloo")
    # The tpcomm group behind torch's default group: tpcomm's API runs on the same group.
    tp_group = dist.distributed_c10d._get_default_group()._get_backend(
        torch.device("cpu")).tpcomm_group
    arr = np.zeros(1, dtype=np.float64)
    ten = torch.zeros(1, dtype=torch.float64)
    ways = {
        "tpcomm.all_reduce (numpy float64[1])": lambda: tpcomm.all_reduce(arr, group=tp_group),
        "torch.distributed, backend tpcomm": lambda: dist.all_reduce(ten),
        "torch.distributed, backend gloo": lambda: dist.all_reduce(ten, group=gloo),
    }
    times = {k: [] for k in ways}
    for name, fn in ways.items():  # warm-up: connections, shared memory, first calls
        for _ in range(200):
            fn()
    for _ in range(args.rounds):
        for name, fn in ways.items():
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                fn()
            times[name].append((time.perf_counter() - t0) / args.iters * 1e6)
    if dist.get_rank() == 0:
        print(f"2 ranks, 8-byte all_reduce, {args.rounds} rounds x {args.iters} calls "
              f"(median round; min-max):")
        for name, ts in times.items():
            print(f"  {name:40s} {statistics.median(ts):8.1f} us  ({min(ts):.1f}-{max(ts):.1f})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
