#!/bin/sh
# cuda-fake.sh — the device-buffer paths of every collective, without a GPU.
#
# loom-perf -G 1 runs with Loom and the tool both loading the stand-in driver
# of tests/unit/fakecuda.c (LOOM_CUDA_LIB): device memory the CPU cannot
# touch, asynchronous streams, IPC between the ranks' processes, kernels run
# on the CPU by name. So this checks, for every collective, datatype,
# operation and root, what the CUDA executor asks of a GPU — chunks issued in
# order, counters published only after the work, p2p slots in the
# receiver's GPU memory, host-staged slots, CUDA stream ordering — and not
# the kernels themselves, which only tests/gpu/run executes.
#
# Cases: 1, 2 and 4 ranks on a CUDA stream (-z 0); blocking calls with tiny
# FIFOs; p2p disabled (host-staged); two channels; the kernel that stands in
# for stream memory operations; misaligned buffers; every command of the
# fake delayed. Then tests/gpu/check_gpu, the GPU unit tests, on the stand-in
# (its kernel comparisons only compare reduce.c with itself there; its cases
# of ranks as threads of one process, stream order, a launch's timeout and
# CUDA graph capture run the library's real logic). Then loom-perf without a
# driver: host buffers by default, a clear error for -G 1. About 50 s on 2
# cores (more when they are busy).
# shellcheck disable=SC2086 # ALL, SIZES and PERF_ENV are word lists, split on purpose
set -u
. "$(dirname "$0")/common.sh"

require_tools loomrun loom-perf loom-info
FAKE=$top_builddir/tests/unit/.libs/libfakecuda.so
[ -f "$FAKE" ] || skip "$FAKE is not built (make check builds it)"

LOOM_TIMEOUT=${LOOM_TIMEOUT:-60}
LOOM_CUDA_LIB=$FAKE
export LOOM_TIMEOUT LOOM_CUDA_LIB

# A build without CUDA has no kernels: device buffers are refused with a reason.
if "$LOOM_INFO" | grep -q "cuda=no"; then
    run_to "$TEST_TMPDIR/nocuda.out" "$TEST_TMPDIR/nocuda.err" "$LOOMRUN" -n 1 "$LOOM_PERF" -G 1 \
        -b 8 -e 8 -n 1 -w 0
    grep -q "built without CUDA" "$TEST_TMPDIR/nocuda.err" ||
        { show_log "$TEST_TMPDIR/nocuda.err"; fail "device buffers in a build without CUDA"; }
    skip "built without CUDA: device buffers are refused, as they should be"
fi

ALL="-G 1 -C all -d all -o all -r all"
SIZES="-b 4 -e 40000 -f 7"

for n in 1 2 4; do
    perf_case $n $ALL $SIZES
done

PERF_ENV="LOOM_BUFFSIZE=4096"
perf_case 3 $ALL $SIZES -z 1
PERF_ENV="LOOM_BUFFSIZE=4096 LOOM_P2P_DISABLE=1"
perf_case 3 $ALL $SIZES
PERF_ENV="LOOM_BUFFSIZE=4096 LOOM_NCHANNELS=2"
perf_case 4 $ALL $SIZES -O 3
PERF_ENV="FAKECUDA_NO_MEMOPS=1"
perf_case 2 $ALL $SIZES -O 1
PERF_ENV="FAKECUDA_DELAY_US=50 LOOM_BUFFSIZE=4096"
perf_case 3 -G 1 -C all -d float -o sum $SIZES
PERF_ENV=

CHECK_GPU=$top_builddir/tests/gpu/check_gpu
if [ -x "$CHECK_GPU" ]; then
    run_to "$TEST_TMPDIR/check_gpu.out" "$TEST_TMPDIR/check_gpu.err" "$CHECK_GPU" ||
        { show_log "$TEST_TMPDIR/check_gpu.out"; show_log "$TEST_TMPDIR/check_gpu.err";
          record_failure "tests/gpu/check_gpu on the stand-in driver"; }
else
    note "tests/gpu/check_gpu is not built: not run on the stand-in"
fi

# No driver: host buffers by default, and -G 1 is refused with a reason.
LOOM_CUDA_LIB=/nonexistent/libcuda.so.1
run_to "$TEST_TMPDIR/nodrv.out" "$TEST_TMPDIR/nodrv.err" "$LOOMRUN" -n 2 "$LOOM_PERF" -b 8 -e 8 \
    -n 1 -w 0 || record_failure "loom-perf without a driver failed"
grep -q "buffers: host" "$TEST_TMPDIR/nodrv.out" ||
    { show_log "$TEST_TMPDIR/nodrv.out"; record_failure "without a driver, buffers are not host"; }
run_to "$TEST_TMPDIR/g1.out" "$TEST_TMPDIR/g1.err" "$LOOMRUN" -n 1 "$LOOM_PERF" -G 1 -b 8 -e 8
status=$?
[ "$status" -eq 2 ] || record_failure "-G 1 without a driver: exit status $status, expected 2"
grep -q "CUDA driver cannot be loaded" "$TEST_TMPDIR/g1.err" ||
    { show_log "$TEST_TMPDIR/g1.err"; record_failure "-G 1 without a driver gave no reason"; }

finish
