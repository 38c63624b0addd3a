"""ops.py — every torch.distributed operation of the "loom" backend, checked.

Run by ops.sh: `python3 ops.py WORLD TMPDIR` starts WORLD processes
(torch.multiprocessing.spawn). Each process

1. joins a "loom" default group by env://, then file://, then tcp:// (an
   all_reduce in each, then destroy_process_group), and once more by env://
   for the rest;
2. for n = 1 .. WORLD, makes a "loom" and a "gloo" group of ranks 0..n-1
   (new_group) and runs every operation and dtype through both: the result
   must equal the exact one computed here from every rank's input (inputs are
   small integers, so every dtype's result is exact), and gloo's result where
   gloo can do the call;
3. checks async_op=True (Work.wait, is_completed, get_future; inputs copied
   behind operations in flight see what they wrote), non-contiguous
   tensors, that unsupported calls raise a RuntimeError naming what is
   unsupported, gather, scatter, all_gather_coalesced,
   barrier(device_ids=) and monitored_barrier;
4. splits the default group (dist.split_group: evens and odds, then the
   first and last rank alone) and, after a new init with device_id cpu:0,
   makes new_groups of the evens and the odds, which torch then makes by
   splitting too: each all_reduce is checked and its communicator must come
   from loomCommSplit (groups of step 2 from a fresh unique id);

Prints "ops: rank R: N checks passed" per rank; any mismatch raises.
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DTYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64]
OPS = ["SUM", "PRODUCT", "MIN", "MAX", "AVG"]


class Checker:
    def __init__(self, rank):
        self.rank = rank
        self.count = 0

    def eq(self, got, want, what):
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            raise AssertionError("rank %d: %s: got %s, want %s" % (self.rank, what, got, want))
        self.count += 1

    def raises(self, fn, words, what):
        try:
            fn()
        except RuntimeError as e:
            msg = str(e)
            for w in words:
                if w not in msg:
                    raise AssertionError("rank %d: %s: error %r lacks %r" % (self.rank, what, msg, w))
            self.count += 1
            return
        raise AssertionError("rank %d: %s: no RuntimeError" % (self.rank, what))


def data(rank, dtype, shape, salt=0):
    """Rank `rank`'s input: small integers (negative too for signed types)."""
    n = 1
    for s in shape:
        n *= s
    base = torch.arange(n, dtype=torch.int64).reshape(shape)
    v = (base * 7 + rank * 5 + salt * 3) % 4
    if dtype not in (torch.uint8,):
        v = v - 1  # -1 .. 2
    return v.to(dtype)


def reduce_ref(inputs, op, n):
    x = torch.stack([t.to(torch.float64) for t in inputs])
    dtype = inputs[0].dtype
    if op == "SUM":
        return x.sum(0).to(dtype)
    if op == "PRODUCT":
        return x.prod(0).to(dtype)
    if op == "MIN":
        return x.min(0).values.to(dtype)
    if op == "MAX":
        return x.max(0).values.to(dtype)
    s = x.sum(0)
    if dtype.is_floating_point:
        if dtype in (torch.float16, torch.bfloat16):
            return (s.to(dtype).float() / n).to(dtype)
        return s.to(dtype) / n
    return torch.div(s.to(torch.int64), n, rounding_mode="trunc").to(dtype)


def try_gloo(fn):
    """Runs fn on the gloo group; None if gloo refuses the call."""
    try:
        return fn()
    except (RuntimeError, ValueError):
        return None


def run_group(ck, rank, n, lm, gl):
    shape = (3, 5)
    red = {name: getattr(dist.ReduceOp, name) for name in OPS}
    for dtype in DTYPES:
        ins = [data(r, dtype, shape) for r in range(n)]
        mine = ins[rank]
        for op in OPS:
            want = reduce_ref(ins, op, n)
            t = mine.clone()
            dist.all_reduce(t, op=red[op], group=lm)
            ck.eq(t, want, "n=%d all_reduce %s %s" % (n, op, dtype))
            g = mine.clone()
            if op != "AVG" and try_gloo(lambda: dist.all_reduce(g, op=red[op], group=gl) or True):
                ck.eq(t, g, "n=%d all_reduce %s %s against gloo" % (n, op, dtype))
        # reduce to the last rank
        root = n - 1
        for op in ("SUM", "MAX"):
            t = mine.clone()
            dist.reduce(t, dst=root, op=red[op], group=lm)
            if rank == root:
                ck.eq(t, reduce_ref(ins, op, n), "n=%d reduce %s %s" % (n, op, dtype))
        # broadcast from the last rank
        t = mine.clone()
        dist.broadcast(t, src=root, group=lm)
        ck.eq(t, ins[root], "n=%d broadcast %s" % (n, dtype))
        # all_gather (list and flat)
        outs = [torch.zeros_like(mine) for _ in range(n)]
        dist.all_gather(outs, mine, group=lm)
        for r in range(n):
            ck.eq(outs[r], ins[r], "n=%d all_gather %s block %d" % (n, dtype, r))
        flat = torch.zeros((n * shape[0], shape[1]), dtype=dtype)
        dist.all_gather_into_tensor(flat, mine, group=lm)
        ck.eq(flat, torch.cat(ins), "n=%d all_gather_into_tensor %s" % (n, dtype))
        gflat = torch.zeros_like(flat)
        if try_gloo(lambda: dist.all_gather_into_tensor(gflat, mine, group=gl) or True):
            ck.eq(flat, gflat, "n=%d all_gather_into_tensor %s against gloo" % (n, dtype))
        # reduce_scatter (list and flat): input is n blocks of shape
        big = [data(r, dtype, (n * shape[0], shape[1]), salt=1) for r in range(n)]
        for op in ("SUM", "MAX"):
            want = reduce_ref(big, op, n).chunk(n)[rank]
            out = torch.zeros(shape, dtype=dtype)
            dist.reduce_scatter(out, list(big[rank].chunk(n)), op=red[op], group=lm)
            ck.eq(out, want, "n=%d reduce_scatter %s %s" % (n, op, dtype))
            out = torch.zeros(shape, dtype=dtype)
            dist.reduce_scatter_tensor(out, big[rank], op=red[op], group=lm)
            ck.eq(out, want, "n=%d reduce_scatter_tensor %s %s" % (n, op, dtype))
            gout = torch.zeros(shape, dtype=dtype)
            if try_gloo(lambda: dist.reduce_scatter_tensor(gout, big[rank], op=red[op], group=gl) or True):
                ck.eq(out, gout, "n=%d reduce_scatter_tensor %s %s against gloo" % (n, op, dtype))
        # all_to_all_single, equal blocks
        src = data(rank, dtype, (n * 2, 3), salt=2)
        out = torch.zeros_like(src)
        dist.all_to_all_single(out, src, group=lm)
        want = torch.cat([data(r, dtype, (n * 2, 3), salt=2)[2 * rank:2 * rank + 2] for r in range(n)])
        ck.eq(out, want, "n=%d all_to_all_single %s" % (n, dtype))
        gout = torch.zeros_like(src)
        if try_gloo(lambda: dist.all_to_all_single(gout, src, group=gl) or True):
            ck.eq(out, gout, "n=%d all_to_all_single %s against gloo" % (n, dtype))

    # all_to_all_single with split sizes: rank r sends (r + p) % 3 + 1 rows to p
    def rows(r, p):
        return (r + p) % 3 + 1
    ins_sp = [data(r, torch.float32, (sum(rows(r, p) for p in range(n)), 2), salt=3) for r in range(n)]
    in_splits = [rows(rank, p) for p in range(n)]
    out_splits = [rows(p, rank) for p in range(n)]
    out = torch.zeros((sum(out_splits), 2))
    dist.all_to_all_single(out, ins_sp[rank], out_splits, in_splits, group=lm)
    parts = []
    for p in range(n):
        off = sum(rows(p, q) for q in range(rank))
        parts.append(ins_sp[p][off:off + rows(p, rank)])
    ck.eq(out, torch.cat(parts), "n=%d all_to_all_single with split sizes" % n)
    gout = torch.zeros_like(out)
    dist.all_to_all_single(gout, ins_sp[rank], out_splits, in_splits, group=gl)
    ck.eq(out, gout, "n=%d all_to_all_single with split sizes against gloo" % n)

    # all_to_all with a list of tensors of different sizes (int16: sent as bytes)
    ins_l = [data(rank, torch.int16, (rows(rank, p),), salt=p) for p in range(n)]
    outs_l = [torch.zeros(rows(p, rank), dtype=torch.int16) for p in range(n)]
    dist.all_to_all(outs_l, ins_l, group=lm)
    for p in range(n):
        ck.eq(outs_l[p], data(p, torch.int16, (rows(p, rank),), salt=rank), "n=%d all_to_all from %d" % (n, p))

    # types Loom cannot reduce still move: bool and complex broadcast / all_gather
    b = (data(rank, torch.int32, (7,)) > 0)
    bb = b.clone()
    dist.broadcast(bb, src=0, group=lm)
    ck.eq(bb, data(0, torch.int32, (7,)) > 0, "n=%d broadcast bool" % n)
    c = torch.complex(data(rank, torch.float32, (4,)), data(rank, torch.float32, (4,), salt=1))
    cs = [torch.zeros_like(c) for _ in range(n)]
    dist.all_gather(cs, c, group=lm)
    for r in range(n):
        ck.eq(cs[r], torch.complex(data(r, torch.float32, (4,)), data(r, torch.float32, (4,), salt=1)),
              "n=%d all_gather complex" % n)

    # non-contiguous tensors: a transposed view in place, a strided view gathered
    base = data(rank, torch.float32, (4, 6))
    view = base.t()
    dist.all_reduce(view, group=lm)
    ck.eq(base, reduce_ref([data(r, torch.float32, (4, 6)) for r in range(n)], "SUM", n),
          "n=%d all_reduce of a transposed view" % n)
    dest = torch.zeros((n, 8))
    outs = [dest[r, ::2] for r in range(n)]
    dist.all_gather(outs, data(rank, torch.float32, (4,)), group=lm)
    for r in range(n):
        ck.eq(dest[r, ::2], data(r, torch.float32, (4,)), "n=%d all_gather into strided views" % n)
        ck.eq(dest[r, 1::2], torch.zeros(4), "n=%d all_gather leaves the gaps" % n)

    # all_reduce_coalesced (if this torch still has it), through the C++ op
    if hasattr(dist, "all_reduce_coalesced"):
        ts = [data(rank, torch.float32, (3,)), data(rank, torch.float32, (2, 2), salt=1)]
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dist.all_reduce_coalesced(ts, group=lm)
        ck.eq(ts[0], reduce_ref([data(r, torch.float32, (3,)) for r in range(n)], "SUM", n),
              "n=%d all_reduce_coalesced 0" % n)
        ck.eq(ts[1], reduce_ref([data(r, torch.float32, (2, 2), salt=1) for r in range(n)], "SUM", n),
              "n=%d all_reduce_coalesced 1" % n)

    # send / recv around the ring: even ranks send first, odd ranks receive first
    if n > 1:
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        s = data(rank, torch.float64, (5,), salt=4)
        r_ = torch.zeros(5, dtype=torch.float64)
        if rank % 2 == 0:
            dist.send(s, dst=nxt, group=lm)
            dist.recv(r_, src=prv, group=lm)
        else:
            dist.recv(r_, src=prv, group=lm)
            dist.send(s, dst=nxt, group=lm)
        ck.eq(r_, data(prv, torch.float64, (5,), salt=4), "n=%d send/recv" % n)

        # batch_isend_irecv with every rank sending first, to both neighbours, 4 MiB
        # each (far more than a link buffers): runs only as one group
        big_s = [data(rank, torch.float32, (1 << 20,), salt=5 + k) for k in range(2)]
        big_r = [torch.zeros(1 << 20) for _ in range(2)]
        ops = [dist.P2POp(dist.isend, big_s[0], nxt, group=lm),
               dist.P2POp(dist.isend, big_s[1], prv, group=lm),
               dist.P2POp(dist.irecv, big_r[0], prv, group=lm),
               dist.P2POp(dist.irecv, big_r[1], nxt, group=lm)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        ck.eq(big_r[0], data(prv, torch.float32, (1 << 20,), salt=5), "n=%d batch_isend_irecv from prev" % n)
        ck.eq(big_r[1], data(nxt, torch.float32, (1 << 20,), salt=6), "n=%d batch_isend_irecv from next" % n)

    # async: several operations in flight, then waited for
    ts = [data(rank, torch.float32, (1000,), salt=k) for k in range(4)]
    works = [dist.all_reduce(t, group=lm, async_op=True) for t in ts]
    futs = [w.get_future() for w in works]
    for k, w in enumerate(works):
        w.wait()
        if not w.is_completed():
            raise AssertionError("rank %d: work %d not completed after wait" % (rank, k))
        want = reduce_ref([data(r, torch.float32, (1000,), salt=k) for r in range(n)], "SUM", n)
        ck.eq(ts[k], want, "n=%d async all_reduce %d" % (n, k))
        ck.eq(futs[k].wait()[0], want, "n=%d future of all_reduce %d" % (n, k))
    # an input copied while operations are in flight (a transposed view, a
    # coalesced list) is copied when they are done, so it holds what they wrote
    for k in range(5):
        big = torch.ones(1 << 18)
        base = torch.ones(4, 6)
        works = [dist.all_reduce(big, group=lm, async_op=True),
                 dist.all_reduce(base, group=lm, async_op=True),
                 dist.all_reduce(base.t(), group=lm, async_op=True)]
        if hasattr(dist, "all_reduce_coalesced"):
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                works.append(dist.all_reduce_coalesced([base[0:2], base[2:4]], group=lm,
                                                       async_op=True))
        for w in works:
            w.wait()
        ck.eq(base, torch.full((4, 6), float(n ** (len(works) - 1))),
              "n=%d async all_reduces of one tensor, in order %d" % (n, k))
    dist.barrier(group=lm)

    # what Loom cannot do is refused on the caller's thread, naming it
    t = data(rank, torch.int32, (4,))
    ck.raises(lambda: dist.all_reduce(t, op=dist.ReduceOp.BAND, group=lm), ["loom", "BAND"], "BAND")
    ck.raises(lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int16), group=lm),
              ["loom", "Short", "cannot be reduced"], "int16 all_reduce")
    ck.raises(lambda: dist.all_reduce(torch.zeros(3, dtype=torch.bool), group=lm),
              ["loom", "Bool"], "bool all_reduce")
    ck.raises(lambda: dist.all_reduce(torch.eye(3).to_sparse(), group=lm),
              ["loom", "only dense tensors", "Sparse"], "sparse all_reduce")
    if n > 1:
        ck.raises(lambda: dist.recv(torch.zeros(2), group=lm), ["loom", "any source"], "recv from any source")

    # gather and scatter (one AlltoAllv each), to and from the last rank
    root = dist.get_global_rank(lm, n - 1)
    for dtype in (torch.float32, torch.int16):
        mine = data(rank, dtype, (2, 3), salt=7)
        outs = [torch.zeros((2, 3), dtype=dtype) for _ in range(n)] if rank == n - 1 else None
        dist.gather(mine, outs, dst=root, group=lm)
        if rank == n - 1:
            for r in range(n):
                ck.eq(outs[r], data(r, dtype, (2, 3), salt=7), "n=%d gather %s from %d" % (n, dtype, r))
        ins = [data(p, dtype, (5,), salt=8 + (n - 1)) for p in range(n)] if rank == n - 1 else None
        out = torch.zeros(5, dtype=dtype)
        dist.scatter(out, ins, src=root, group=lm)
        ck.eq(out, data(rank, dtype, (5,), salt=8 + (n - 1)), "n=%d scatter %s" % (n, dtype))

    # all_gather_coalesced (one AllGather of bytes): int16 tensors of two shapes, then complex ones
    if hasattr(dist, "all_gather_coalesced"):
        import warnings

        def mk(r, k):
            if k < 2:
                return data(r, torch.int16, ((3,), (2, 2))[k], salt=k)
            return torch.complex(data(r, torch.float64, (2,), salt=k), data(r, torch.float64, (2,), salt=k + 1))
        for ks in ((0, 1), (2, 3)):
            ins = [mk(rank, k) for k in ks]
            outs = [[torch.zeros_like(t) for t in ins] for _ in range(n)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dist.all_gather_coalesced(outs, ins, group=lm)
            for r in range(n):
                for i, k in enumerate(ks):
                    ck.eq(outs[r][i], mk(r, k), "n=%d all_gather_coalesced %d from %d" % (n, k, r))

    # barrier with device_ids (ignored on CPU, as gloo does) and monitored_barrier
    dist.barrier(group=lm, device_ids=[0])
    dist.monitored_barrier(group=lm, wait_all_ranks=True)
    ck.count += 1


def origin(group):
    """How the group's Loom communicator was made: "unique id", "split" or "shrink"."""
    import torch_loom
    return torch_loom._C.origin(group._get_backend(torch.device("cpu")))


def check_split(ck, rank, split, g, how):
    """g, made by how from split (lists of ranks): an all_reduce in it sums its
    members' inputs, over a communicator made by loomCommSplit; a rank in no
    list got no group."""
    mine = [r for r in split if rank in r]
    if not mine:
        if g != dist.GroupMember.NON_GROUP_MEMBER:
            raise AssertionError("rank %d: %s %s: a group for a rank in none" % (rank, how, split))
        ck.count += 1
        return
    members = mine[0]
    if origin(g) != "split" or g.size() != len(members) or g.rank() != sorted(members).index(rank):
        raise AssertionError("rank %d: %s %s: %s communicator, rank %d of %d" %
                             (rank, how, split, origin(g), g.rank(), g.size()))
    t = data(rank, torch.float32, (6,), salt=7)
    dist.all_reduce(t, group=g)
    ck.eq(t, reduce_ref([data(r, torch.float32, (6,), salt=7) for r in members], "SUM", len(members)),
          "%s %s: all_reduce" % (how, split))


def free_ports(k):
    import socket
    socks = [socket.socket() for _ in range(k)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def worker(rank, world, ports, tmp):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(ports[0])
    import torch_loom  # noqa: F401  registers "loom" in this process
    ck = Checker(rank)
    timeout = datetime.timedelta(seconds=120)
    for k, method in enumerate(["env://", "file://%s/store" % tmp, "tcp://127.0.0.1:%d" % ports[1]]):
        if method == "env://":
            dist.init_process_group("loom", rank=rank, world_size=world, timeout=timeout)
        else:
            dist.init_process_group("loom", init_method=method, rank=rank, world_size=world, timeout=timeout)
        t = torch.full((4,), float(rank + k))
        dist.all_reduce(t)
        ck.eq(t, torch.full((4,), float(sum(range(world)) + world * k)), "init %s" % method)
        if dist.get_backend() != "loom":
            raise AssertionError("backend is %s" % dist.get_backend())
        dist.destroy_process_group()
    os.environ["MASTER_PORT"] = str(ports[2])
    dist.init_process_group("loom", rank=rank, world_size=world, timeout=timeout)
    for n in range(1, world + 1):
        ranks = list(range(n))
        lm = dist.new_group(ranks, backend="loom")
        gl = dist.new_group(ranks, backend="gloo")
        if rank < n:
            if origin(lm) != "unique id":
                raise AssertionError("rank %d: new_group without a bound device: communicator "
                                     "made by %s, not a fresh unique id" % (rank, origin(lm)))
            run_group(ck, rank, n, lm, gl)
        dist.barrier()
    # dist.split_group: evens and odds; then the first and last rank alone
    halves = [r for r in ([list(range(0, world, 2)), list(range(1, world, 2))]) if r]
    for split in [halves, [[0, world - 1]]]:
        check_split(ck, rank, split, dist.split_group(split_ranks=split), "split_group")
    dist.destroy_process_group()
    # new_group when the default group has a bound device: torch splits the
    # default group's backend (members) and calls perform_nocolor_split on it
    # (the others)
    os.environ["MASTER_PORT"] = str(ports[3])
    dist.init_process_group("loom", rank=rank, world_size=world, timeout=timeout,
                            device_id=torch.device("cpu", 0))
    for split in halves:
        check_split(ck, rank, [split], dist.new_group(split), "new_group, bound device")
    gl = dist.new_group(list(range(world)), backend="gloo")
    t = torch.ones(3)
    dist.all_reduce(t, group=gl)
    ck.eq(t, torch.full((3,), float(world)), "gloo new_group beside a bound loom default group")
    dist.destroy_process_group()
    # One write per line: the ranks share the log, and a line split in two
    # writes can be interleaved with another rank's.
    os.write(1, ("ops: rank %d: %d checks passed\n" % (rank, ck.count)).encode())


if __name__ == "__main__":
    world, tmp = int(sys.argv[1]), sys.argv[2]
    mp.spawn(worker, args=(world, free_ports(4), tmp), nprocs=world)
