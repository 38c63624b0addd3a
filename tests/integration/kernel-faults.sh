#!/bin/sh
# kernel-faults.sh — failures under the kernel executor (LOOM_EXECUTOR=kernel).
#
# tests/faults/check_faults's shared-memory cases again, with host buffers
# run by the plan interpreter's host build (src/exec/kexec.c): ranks SIGKILLed
# and SIGSTOPped mid-collective, LOOM_TIMEOUT, loomCommAbort from another
# thread. Each survivor must return within its bound with the line that
# names the failed rank, as under the host executor: the interpreter's
# blocks poll an abort flag that their watchdog (the host executor's
# failure checks, run in each block's waits) raises. The single-copy cases
# run without single copies here (the kernel executor turns them off), so
# they check the same faults through the FIFOs. The second pass runs blocks
# of 2 threads on 2 channels, so the communicator's worker threads (kexec.c)
# are inside the runs that fail, and are joined at destroy and abort.
set -u
. "$(dirname "$0")/common.sh"

prog=$top_builddir/tests/faults/check_faults
[ -x "$prog" ] || skip "$prog is not built (run make check first)"
LOOM_EXECUTOR=kernel CK_RUN_CASE=shm run "$prog" || record_failure "check_faults (shm) with LOOM_EXECUTOR=kernel"
LOOM_EXECUTOR=kernel LOOM_KERNEL_THREADS=2 LOOM_NCHANNELS=2 CK_RUN_CASE=shm run "$prog" ||
    record_failure "check_faults (shm) with LOOM_EXECUTOR=kernel, 2 threads, 2 channels"
finish
