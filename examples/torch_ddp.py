"""torch_ddp.py — a small DistributedDataParallel training loop.

    torchrun --nproc_per_node=4 examples/torch_ddp.py --backend loom
    torchrun --nproc_per_node=4 examples/torch_ddp.py --backend gloo

(or python3 -m torch.distributed.run ...). Every rank trains the same MLP on
its own fixed batch; rank 0 prints the mean loss of each step and a checksum
of the weights at the end, so the two backends can be compared line by line,
then the mean step time (not part of the comparison). "loom" needs the
torch_loom package on the path (make install, or PYTHONPATH=python/stage in
the build tree).
"""
import argparse
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=["loom", "gloo"], default="loom")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=256, help="hidden layer width")
    p.add_argument("--bucket-mb", type=float, default=1.0, help="DDP bucket_cap_mb")
    args = p.parse_args()
    if args.backend == "loom":
        import torch_loom  # noqa: F401  registers the backend "loom"
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    w = args.width
    model = nn.Sequential(nn.Linear(32, w), nn.Tanh(), nn.Linear(w, w), nn.Tanh(),
                          nn.Linear(w, w), nn.Tanh(), nn.Linear(w, 1))
    ddp = DDP(model, bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(args.batch, 32, generator=g)
    y = torch.sin(x.sum(1, keepdim=True))
    times = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        if rank == 0:
            print("step %d loss %.5f" % (step, mean.item() / world), flush=True)
    sums = torch.stack([q.detach().double().abs().sum() for q in model.parameters()]).sum()
    if rank == 0:
        print("weights %.5f" % sums.item())
        steady = sorted(times[len(times) // 4:])
        print("time: %s %d ranks: median step %.3f ms" % (args.backend, world,
                                                         1e3 * steady[len(steady) // 2]), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
