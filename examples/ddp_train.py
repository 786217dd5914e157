"""CPU DDP training of a small model: the same job with --backend tpcomm or --backend gloo
prints the same final loss and parameter digest, bit for bit.

    torchrun --standalone --nproc-per-node 2 examples/ddp_train.py --backend tpcomm
    build-test/bin/tprun --nproc-per-node 2 python examples/ddp_train.py --backend tpcomm

A small --bucket-cap-mb (0.001) splits the gradients into several buckets."""

import argparse
import hashlib

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=["tpcomm", "gloo"], default="tpcomm")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args()
    if args.backend == "tpcomm":
        import tpcomm.torch  # noqa: F401 (registers the backend)
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(args.seed)  # the same initial model on every rank
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                          nn.Linear(64, 1))
    ddp = DDP(model, bucket_cap_mb=args.bucket_cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(args.seed + 1 + rank)  # each rank its own batches
    w_true = torch.linspace(-1, 1, 16)
    loss = torch.zeros(())
    for _ in range(args.steps):
        x = torch.randn(32, 16, generator=data)
        y = torch.sin(x @ w_true).unsqueeze(1)
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
    # The mean loss over ranks, and a digest of the parameters (equal on every rank).
    total = loss.detach().clone()
    dist.all_reduce(total)
    digest = hashlib.sha256()
    for t in model.parameters():
        digest.update(t.detach().numpy().tobytes())
    if rank == 0:
        mean = (total / world).item()
        print(f"backend {args.backend} steps {args.steps} bucket_cap_mb {args.bucket_cap_mb} "
              f"buckets {len(ddp.reducer._get_zeros_like_grad_buckets())}: final loss "
              f"{mean!r} ({mean.hex()}) parameters sha256 {digest.hexdigest()[:16]}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
