"""suite.py — PyTorch's own distributed test file,
torch/testing/_internal/distributed/distributed_test.py, against one backend.

    suite.py BACKEND RESULTS [PATTERN ...]

runs DistributedTest._DistTestBase as PyTorch's CI runs it
(test/distributed/test_distributed_spawn.py: every test in WORLD_SIZE
processes started by spawn, each with init_process_group(BACKEND)), only the
tests whose names contain one of the PATTERNs (all tests with none), and
writes one line per test to RESULTS: "outcome name [reason]", outcome one of
passed, skipped, failed, error. compare.py compares two such files.

The suite decides what to run for a backend by its name: BACKEND == "gloo"
in a test's skip condition, and the sets of DistTestCases. For "loom" this
file adds loom to the sets that name a feature loom has (see FEATURES); a
test gated on a name ("Only gloo backend supports ...") stays skipped.
"""
import os
import sys
import unittest

import torch

if __name__ == "__main__" and len(sys.argv) > 1:
    os.environ["BACKEND"] = sys.argv[1]  # read when distributed_test is imported
    os.environ["SUITE_BACKEND"] = sys.argv[1]
# SUITE_GATES=gloo: the suite decides what to run as it does for gloo (its
# skip conditions are evaluated when it is imported), then runs it with
# BACKEND; for the tests the suite keeps to gloo by name (GLOO_GATED).
NAME = os.environ.get("SUITE_BACKEND") or os.environ.get("BACKEND")
GATES = os.environ.get("SUITE_GATES") or None
if GATES:
    os.environ["BACKEND"] = GATES
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", "/tmp")  # replaced per test by the suite's setUp

# Spawned processes import this file again (as __mp_main__): the backend
# and its features are registered in each of them.
if NAME == "loom":
    import torch_loom  # noqa: F401 (registers the backend)

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

# What loom has, as the suite names it (common_distributed.DistTestCases):
#   ddp       DistributedDataParallel over CPU tensors (tests/torch/ddp.sh)
#   subgroup  new_group / split_group subgroups (ops.py, ddp.sh)
# and what it lacks (skip_collective):
#   "sendrecv anysource"  Loom's receive names its peer (backend.cpp's recvAnysource)
# Not registered as features: "gpu" and "cuda" (torch_loom's CUDA path has
# not been run on a GPU), "plugin". skip_collective names no other
# collective of loom's: it has allgather_coalesced, reduce and a CPU barrier.
FEATURES = ("ddp", "subgroup")
LACKS = ("sendrecv anysource",)
if NAME == "loom":
    for f in FEATURES:
        DistTestCases.backend_feature[f].add("loom")
    for c in LACKS:
        DistTestCases.skip_collective[c].add("loom")

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)
from torch.testing._internal.distributed import distributed_test  # noqa: E402

if GATES:
    distributed_test.BACKEND = os.environ["BACKEND"] = NAME

# Tests the suite runs only for gloo, by name (require_backend_is_available({"gloo"}),
# BACKEND != "gloo", "get_future is only supported on mpi, nccl and gloo"),
# of operations loom has: suite.sh runs them for loom with SUITE_GATES=gloo.
# Left out: the gloo-only tests of what loom lacks (test_sparse_all_reduce_sum,
# test_send_recv_any_source*, monitored_barrier's own timeout: loom waits for
# the group's: test_monitored_barrier_gloo, ..._rank_0_timeout), and
# test_accumulate_gradients_no_sync*, whose bodies make their model only
# where BACKEND is gloo, nccl or mpi.
GLOO_GATED = """test_get_future test_all_gather_object test_all_reduce_coalesced
test_batch_isend_irecv_gloo test_grads_same_across_ranks_with_no_sync
test_monitored_barrier_gloo_subgroup test_scatter_object_list test_barrier_timeout""".split()


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    """PyTorch's CI spawns each test's processes; SUITE_START=fork (what
    tests/torch/suite.sh uses) forks them from this process instead, which
    has imported torch and the suite already: a spawned process imports
    both again, seconds of CPU for every process of every test."""

    def setUp(self):
        super().setUp()
        if os.environ.get("SUITE_START", "spawn") == "fork":
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()


class _Results(unittest.TextTestResult):
    """Writes each test's outcome to a file as it ends."""

    out = None

    def _write(self, outcome, test, why=""):
        name = test.id().rsplit(".", 1)[-1]
        why = " ".join(str(why).split())[-300:]
        self.out.write(f"{outcome} {name} {why}".rstrip() + "\n")
        self.out.flush()

    def addSuccess(self, test):
        super().addSuccess(test)
        self._write("passed", test)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._write("skipped", test, reason)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._write("failed", test, err[1])

    def addError(self, test, err):
        super().addError(test, err)
        self._write("error", test, err[1])

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._write("passed", test, "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._write("failed", test, "unexpected success")


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: suite.py BACKEND RESULTS [PATTERN ...]")
    patterns = sys.argv[3:]
    if patterns == ["GLOO_GATED"]:
        patterns = GLOO_GATED
    names = unittest.TestLoader().getTestCaseNames(TestDistBackendWithSpawn)
    names = [n for n in names if not patterns or any(p in n for p in patterns)]
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    with open(sys.argv[2], "w") as out:
        _Results.out = out
        unittest.TextTestRunner(resultclass=_Results, verbosity=2, stream=sys.stdout).run(suite)
    print(f"suite: {sys.argv[1]}: {len(names)} tests run", flush=True)


if __name__ == "__main__":
    main()
