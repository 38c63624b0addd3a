#!/bin/sh
# perf-matrix.sh — every collective, datatype, operation and root, checked exactly.
#
# loom-perf builds inputs whose results are exact in every datatype, checks
# every element of every rank (out of place and in place), the send buffers
# and guard bytes around each buffer, and exits 1 on any wrong value. This
# script runs it as a correctness sweep (-n 1 -w 0: one timed call, no
# warmups; the timings are ignored) over odd sizes on 1, 2, 3, 4, 5 and 8
# ranks, then at 3 and 4 ranks with misaligned buffers, blocking calls and
# zero counts, and with tiny connector FIFOs (LOOM_BUFFSIZE) and two channels
# so that even these sizes are cut into many chunks. A case passes when
# loom-perf exits 0, prints its footer, and every #wrong column reads 0 (or
# N/A where a mode does not exist).
#
# The whole matrix runs twice: with the tuner's choices, and with
# LOOM_ALGO=tree, which sends AllReduce, Broadcast and Reduce through the
# double binary tree at every size (the other collectives have no tree and
# keep their ring or direct schedules). Then AllReduce alone with
# LOOM_ALGO=allreduce:doubling (recursive doubling at every size) on 1 to 8
# ranks (powers of two and not), misaligned, blocking, with zero counts and
# with tiny FIFOs and two channels.
#
# Then the kernel executor (LOOM_EXECUTOR=kernel: the plan interpreter of
# the GPU kernel, built for the CPU): the whole matrix again with the
# tuner's protocol (LL up to 16 bytes, Simple above, so both), the quick
# cases with LL forced and with Simple forced through the tree, float
# cases with blocks of 2 and 3 threads, and doubling AllReduce with LL.
#
# The sweep is sized to finish well within a few minutes on a 2-core machine
# with more ranks than cores (about 30 s a pass when this was written).
# LOOM_TEST_QUICK=1 (sanitizer builds in CI, which run 5-20x slower) keeps
# one case of each kind: 1, 2 and 4 ranks, one misalignment, zero counts,
# and the tiny-FIFO case with two channels (with LOOM_ALGO=tree as well).
# shellcheck disable=SC2086 # ALL, SIZES and PERF_ENV are word lists, split on purpose
set -u
. "$(dirname "$0")/common.sh"

require_tools loomrun loom-perf

# A hang inside the library becomes an error after this many seconds.
LOOM_TIMEOUT=${LOOM_TIMEOUT:-60}
export LOOM_TIMEOUT

# Host buffers (-G 0) even where a GPU is present: tests/gpu/run covers device buffers.
ALL="-G 0 -C all -d all -o all -r all"
# Sizes 4, 28, 196, 1372 and 9604 bytes: counts such as 7, 49, 343 and 2401
# that fill no vector evenly.
SIZES="-b 4 -e 40000 -f 7"
# ALGO_ENV ("LOOM_ALGO=tree" or empty) goes before PERF_ENV for a whole pass.
ALGO_ENV=

quick() {
    PERF_ENV=$ALGO_ENV
    for n in 1 2 4; do
        perf_case $n $ALL $SIZES
    done
    perf_case 3 $ALL $SIZES -O 3
    perf_case 3 $ALL -b 0 -e 0
    PERF_ENV="$ALGO_ENV LOOM_BUFFSIZE=4096 LOOM_NCHANNELS=2"
    perf_case 4 $ALL $SIZES
    PERF_ENV=
}

matrix() {
    PERF_ENV=$ALGO_ENV
    for n in 1 2 3 4 5 8; do
        perf_case $n $ALL $SIZES
    done

    for n in 3 4; do
        perf_case $n $ALL $SIZES -O 1
        perf_case $n $ALL $SIZES -O 3
        perf_case $n $ALL $SIZES -z 1
        perf_case $n $ALL -b 0 -e 0
    done

    # 512-byte slots: a 9604-byte message takes ~19 of them, wrapping each FIFO twice.
    PERF_ENV="$ALGO_ENV LOOM_BUFFSIZE=4096"
    for n in 3 5; do
        perf_case $n $ALL $SIZES
    done
    PERF_ENV="$ALGO_ENV LOOM_BUFFSIZE=4096 LOOM_NCHANNELS=2"
    perf_case 4 $ALL $SIZES
    PERF_ENV=
}

# Recursive doubling: AllReduce only (the other collectives have no such schedule).
doubling() {
    PERF_ENV="LOOM_ALGO=allreduce:doubling"
    AR="-G 0 -C allreduce -d all -o all"
    if [ "${LOOM_TEST_QUICK:-0}" = 1 ]; then
        for n in 2 3; do
            perf_case $n $AR $SIZES
        done
    else
        for n in 1 2 3 4 5 6 7 8; do
            perf_case $n $AR $SIZES
        done
        perf_case 3 $AR $SIZES -O 3
        perf_case 6 $AR $SIZES -z 1
        perf_case 5 $AR -b 0 -e 0
    fi
    PERF_ENV="LOOM_ALGO=allreduce:doubling LOOM_BUFFSIZE=4096 LOOM_NCHANNELS=2"
    perf_case 5 $AR $SIZES
    PERF_ENV=
}

pass=matrix
if [ "${LOOM_TEST_QUICK:-0}" = 1 ]; then
    note "LOOM_TEST_QUICK=1: a reduced matrix"
    pass=quick
fi
ALGO_ENV=
$pass
ALGO_ENV="LOOM_ALGO=tree"
$pass
ALGO_ENV=
doubling

ALGO_ENV="LOOM_EXECUTOR=kernel"
$pass
ALGO_ENV="LOOM_EXECUTOR=kernel LOOM_PROTO=LL"
quick
ALGO_ENV="LOOM_EXECUTOR=kernel LOOM_PROTO=Simple LOOM_ALGO=tree"
quick
ALGO_ENV=
# Blocks of several threads (their barriers, a step split among threads): a
# few cases only, since on a loaded host every barrier waits for the
# scheduler.
PERF_ENV="LOOM_EXECUTOR=kernel LOOM_PROTO=LL LOOM_KERNEL_THREADS=2"
perf_case 2 -G 0 -C all -d float -o all $SIZES
PERF_ENV="LOOM_EXECUTOR=kernel LOOM_PROTO=Simple LOOM_KERNEL_THREADS=3 LOOM_BUFFSIZE=4096 LOOM_NCHANNELS=2"
perf_case 3 -G 0 -C all -d float -o sum $SIZES
PERF_ENV="LOOM_EXECUTOR=kernel LOOM_PROTO=LL LOOM_ALGO=allreduce:doubling"
perf_case 5 -G 0 -C allreduce -d all -o all $SIZES
PERF_ENV=

finish
