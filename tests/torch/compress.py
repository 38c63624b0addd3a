"""compress.py — torch_loom.Options(net_compress=...): a process group whose
float32 all_reduce and reduce_scatter send bfloat16 over network links.

Run by compress.sh: `python3 compress.py WORLD TMPDIR` starts WORLD processes
(torch.multiprocessing.spawn) with LOOM_SHM_DISABLE=1, so every link is TCP.
Each process joins a "loom" default group made with
pg_options=torch_loom.Options(net_compress="bf16"), and checks that

1. a float32 all_reduce of values that are no bfloat16 values comes back as
   bfloat16 values (the low 16 bits zero), within loom(7)'s bound of the
   exact sum, the same on every rank;
2. a float64 all_reduce on that group raises a RuntimeError saying that the
   config applies to float32 only;
3. a new_group made without options sums float32 exactly (LOOM_NET_COMPRESS
   is unset);
4. Options refuses a mode it does not know (ValueError).

Prints "compress: rank R: N checks passed" per rank; any failure raises.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import torch_loom


def main(rank, world, tmpdir):
    os.environ.update(MASTER_ADDR="127.0.0.1", RANK=str(rank), WORLD_SIZE=str(world))
    dist.init_process_group("loom", pg_options=torch_loom.Options(net_compress="bf16"))
    checks = 0
    n = 10007
    g = torch.Generator().manual_seed(1234)
    inputs = [torch.randn(n, generator=g) * 3 for _ in range(world)]
    x = inputs[rank].clone()
    dist.all_reduce(x)
    exact = torch.stack([t.double() for t in inputs]).sum(0)
    mag = torch.stack([t.double().abs() for t in inputs]).sum(0)
    u = 2.0 ** -8 + 2.0 ** -23
    bound = ((1 + u) ** world - 1) * mag
    assert bool(((x.double() - exact).abs() <= bound).all()), "rank %d: out of bound" % rank
    checks += 1
    assert bool((x.view(torch.int32) & 0xFFFF == 0).all()), "rank %d: float32 on the wire" % rank
    checks += 1
    everyone = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(everyone, x)
    assert all(torch.equal(e, x) for e in everyone), "rank %d: ranks differ" % rank
    checks += 1
    try:
        dist.all_reduce(torch.ones(4, dtype=torch.float64))
        raise AssertionError("rank %d: float64 all_reduce was not refused" % rank)
    except RuntimeError as e:
        assert "float32 only" in str(e), "rank %d: %s" % (rank, e)
        checks += 1
    plain = dist.new_group(list(range(world)))
    y = torch.full((n,), float(rank + 1) + 0.125)
    dist.all_reduce(y, group=plain)
    assert bool((y == world * (world + 1) / 2 + 0.125 * world).all()), "rank %d: new_group" % rank
    checks += 1
    try:
        torch_loom.Options(net_compress="fp8")
        raise AssertionError("Options took fp8")
    except ValueError:
        checks += 1
    dist.destroy_process_group()
    print("compress: rank %d: %d checks passed" % (rank, checks), flush=True)


if __name__ == "__main__":
    world = int(sys.argv[1])
    os.environ["LOOM_SHM_DISABLE"] = "1"
    os.environ.pop("LOOM_NET_COMPRESS", None)
    os.environ["MASTER_PORT"] = str(29500 + os.getpid() % 2000)
    mp.spawn(main, args=(world, sys.argv[2]), nprocs=world)
