"""fault.py — a rank that dies gives the survivors a RuntimeError, not a hang.

`python3 fault.py` starts 3 processes (subprocess, env://, the group timeout
30 s); after one good all_reduce, rank 2 exits without a word and ranks 0 and
1 all_reduce again. Each survivor must get a RuntimeError whose line comes
from Loom and names rank 2, within 60 s; torch_loom.failed_ranks() must say
[2]; shrink_group([2], SHRINK_ABORT) must give a group of 2 that runs 20
correct all_reduces; and destroy_process_group must then return. Prints "fault: rank R: ..." for each survivor; exits 1 on any miss.
"""
import datetime
import os
import socket
import subprocess
import sys
import time


def say(line):
    """One line in one write(2): the children share a pipe, and print() may
    hand a line and its newline to it separately, so that two ranks' lines
    run together (seen: two "shrank" lines on one line, and the test failed)."""
    os.write(1, (line + "\n").encode())


def child(rank):
    import torch
    import torch.distributed as dist
    import torch_loom
    from torch.distributed.distributed_c10d import SHRINK_ABORT, shrink_group
    dist.init_process_group("loom", rank=rank, world_size=3, timeout=datetime.timedelta(seconds=30))
    t = torch.ones(1000)
    dist.all_reduce(t)
    assert t[0].item() == 3
    if rank == 2:
        os._exit(0)
    t0 = time.monotonic()
    try:
        dist.all_reduce(t)
        say("fault: rank %d: all_reduce after rank 2 died returned" % rank)
        sys.exit(1)
    except RuntimeError as e:
        dt = time.monotonic() - t0
        msg = str(e).splitlines()[0]
        say("fault: rank %d: RuntimeError after %.1f s: %s" % (rank, dt, msg))
        if "torch_loom" not in msg or "rank 2" not in msg:
            say("fault: rank %d: the error does not name rank 2" % rank)
            sys.exit(1)
    # go on without rank 2: the ranks Loom saw fail, then shrink_group (loomCommShrink)
    failed = torch_loom.failed_ranks()
    if failed != [2]:
        say("fault: rank %d: failed_ranks() is %s, not [2]" % (rank, failed))
        sys.exit(1)
    t0 = time.monotonic()
    shrink_group(failed, shrink_flags=SHRINK_ABORT)
    for k in range(20):
        t = torch.full((1000,), float(rank + k))
        dist.all_reduce(t)
        if t[0].item() != 1 + 2 * k or dist.get_world_size() != 2:
            say("fault: rank %d: all_reduce %d on the shrunk group gave %s" % (rank, k, t[0].item()))
            sys.exit(1)
    say("fault: rank %d: shrank to ranks 0-1 (%.2f s to shrink and run 20 all_reduces)" %
            (rank, time.monotonic() - t0))
    dist.destroy_process_group()
    say("fault: rank %d: destroyed" % rank)
    sys.exit(0)


def main():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    procs = [subprocess.Popen([sys.executable, __file__, "child", str(r)], env=env) for r in range(3)]
    bad = 0
    for r, p in enumerate(procs):
        try:
            rc = p.wait(timeout=240)
        except subprocess.TimeoutExpired:
            say("fault: rank %d hangs" % r)
            for q in procs:
                q.kill()
            sys.exit(1)
        if rc != 0:
            say("fault: rank %d exited %d" % (r, rc))
            bad = 1
    sys.exit(bad)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "child":
        child(int(sys.argv[2]))
    else:
        main()
