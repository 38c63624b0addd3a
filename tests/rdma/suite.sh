#!/bin/sh
# suite.sh — Loom over InfiniBand verbs on soft-RoCE, run inside the guest
# by tests/rdma/run (it needs rxe0 up; anywhere else it skips).
#
# Ranks look like hosts through LOOM_HOSTID (the fakehost wrapper of net.sh)
# and LOOM_NET=ib makes every link between two "hosts" InfiniBand (or an
# error at init), so everything below crosses rxe0. The checks:
#
# 1. loom-info --comm, 2 hosts x 2 ranks: shm inside a host, net/ib between,
#    and the log says the ranks connected over InfiniBand.
# 2. loom-perf's exact check (every element of every buffer, guards, send
#    buffers left alone) of every collective, datatype, operation and root,
#    in and out of place, Send/Recv in groups: on 2 ranks (2 hosts) and on
#    4 (2 hosts x 2: shared memory inside, IB between); small FIFOs so that
#    the larger sizes wrap them many times. AlltoAllv, which loom-perf
#    lacks, by tests/rdma/alltoallv (uneven counts, every element checked)
#    on 2 and 4 ranks.
# 3. Both GID choices: LOOM_IB_GID_INDEX=0 (link-local) and 1 (the RoCE v2
#    IPv4-mapped address), each a correct run with that GID in the log; unset,
#    Loom picks the IPv4-mapped one.
# 4. check_faults, its across-hosts cases over IB: rank 3 SIGKILLed, every
#    survivor returns loomRemoteError naming it and its host (not
#    loomTimeout); rank 1 stopped, loomTimeout (after 20 s here: init on
#    the emulated CPUs may take more than the case's 5 s); the notice of a death
#    crossing from host to host. check_shrink: after a kill, survivors agree
#    on the failed rank, shrink and run correct AllReduces.
# 5. In every run of 2 and 3 but AlltoAllv's, the proxy's missed wake-ups (its "slept N times;
#    M of them ran to the ... cap" line at LOOM_DEBUG=INFO, subsystem NET)
#    are 0 on every rank: any other count is a bug (loom(7)).
#
# Sizes are small: the guest's CPUs are emulated (two, by tests/rdma/run).
# shellcheck disable=SC2086 # ALL, SIZES are word lists, split on purpose
set -u
. "$top_srcdir/tests/integration/common.sh"
require_tools loomrun loom-perf loom-info
[ -e /sys/class/infiniband/rxe0 ] || skip "no soft-RoCE device rxe0 (run me through tests/rdma/run)"

LOOM_TIMEOUT=${LOOM_TIMEOUT:-60}
LOOM_SPIN=0
LOOM_NET=ib
export LOOM_TIMEOUT LOOM_SPIN LOOM_NET
ALL="-C all -d all -o all -r all"
SIZES="-b 4 -e 1372 -f 343"

fakehost_init

# wakeups DIR CASE NRANKS: every rank's log in DIR says the proxy missed no wake-up.
wakeups() {
    _lines=$(cat "$1"/* 2>/dev/null | grep -c "the proxy slept [0-9]* times; [0-9]* of them")
    _missed=$(cat "$1"/* 2>/dev/null |
        sed -n 's/.*the proxy slept \([0-9]*\) times; \([0-9]*\) of them.*/\2 of \1/p' | tr '\n' ' ')
    if [ "$_lines" -lt "$3" ]; then
        record_failure "$2: $_lines proxy sleep counts for $3 ranks (LOOM_DEBUG=INFO)"
    elif cat "$1"/* | grep "the proxy slept" | grep -vq "times; 0 of them"; then
        record_failure "$2: missed wake-ups (per proxy: $_missed sleeps)"
    else
        note "$2: no missed wake-up (per proxy: $_missed sleeps)"
    fi
}

# ibcase NAME NRANKS PER_HOST LOOM-PERF-OPTIONS...: an exact loom-perf run over IB, with
# PERF_ENV as extra environment, its log in $TEST_TMPDIR/NAME.log and each rank's debug
# log in $TEST_TMPDIR/NAME.dbg/; then its wake-up count.
ibcase() {
    _name=$1 _n=$2 _per=$3 _t0=$(date +%s)
    shift 3
    _dbg=$TEST_TMPDIR/$_name.dbg
    mkdir -p "$_dbg"
    run_logged "$TEST_TMPDIR/$_name.log" env $PERF_ENV LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=NET \
        LOOM_DEBUG_FILE="$_dbg/%p.log" "$LOOMRUN" -n "$_n" --timeout 600 "$FAKE" "$_per" \
        "$LOOM_PERF" -c 1 -n 1 -w 0 "$@"
    perf_check "$TEST_TMPDIR/$_name.log" $? "$_name: $_n ranks, $_per a host, $PERF_ENV $*"
    if ! grep -q "NET/IB: .*connection" "$_dbg"/*; then
        record_failure "$_name: no rank logged an InfiniBand connection"
    fi
    wakeups "$_dbg" "$_name" "$_n"
    note "$_name: $(($(date +%s) - _t0)) s"
}

note "$(ibv_devices | sed -n 3p | tr -s ' \t' ' ') on $(hostname), $(nproc) CPU"

# 1. Links.
log=$TEST_TMPDIR/comm.log
run_logged "$log" env LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=NET "$LOOMRUN" -n 4 "$FAKE" 2 \
    "$LOOM_INFO" --comm
if [ $? -ne 0 ] || ! grep -q "  1 -> 2  net/ib$" "$log" || ! grep -q "  0 -> 1  shm$" "$log" ||
    ! grep -q "NET: rank 0 -> rank 2 (.*): InfiniBand" "$log"; then
    record_failure "loom-info --comm, 2 hosts x 2: no shm and net/ib links, or no InfiniBand line"
    show_log "$log"
fi

# 2. Every collective, datatype, operation and root on 2 ranks; on 4 every one but
# root 0 only, at one size (a call costs many times more there on the emulated
# CPUs). 1 KiB FIFOs: slots of 128 bytes, so that 1372 bytes wrap them.
PERF_ENV="LOOM_BUFFSIZE=1K"
ibcase all2 2 1 $ALL $SIZES
PERF_ENV="LOOM_BUFFSIZE=1K LOOM_NCHANNELS=2"
ibcase all4 4 2 -C all -d all -o all -b 1372 -e 1372
# A large message: 256 KiB through 64 KiB FIFOs (8 KiB slots) on 2 channels.
PERF_ENV="LOOM_BUFFSIZE=64K LOOM_NCHANNELS=2"
ibcase large4 4 2 -C all -d float -o sum -b 256K -e 256K

# AlltoAllv: uneven counts at three scales, through 1 KiB FIFOs.
for n in 2 4; do
    log=$TEST_TMPDIR/alltoallv$n.log
    run_logged "$log" env LOOM_BUFFSIZE=1K "$LOOMRUN" -n $n --timeout 600 "$FAKE" $((n / 2)) \
        "$top_builddir/tests/rdma/alltoallv"
    if [ $? -ne 0 ] || [ "$(grep -c "every element right" "$log")" -ne $n ]; then
        record_failure "alltoallv: $n ranks, $((n / 2)) a host: not every rank got every element"
        show_log "$log"
    else
        note "alltoallv: $n ranks, $((n / 2)) a host: every element right"
    fi
done

# 3. Both GIDs: the link-local (index 0) and the IPv4-mapped one (1, 10.0.2.15 = 0a00:020f),
# which is also what Loom picks by itself (the runs above leave LOOM_IB_GID_INDEX unset).
v4="gid 1 0000:0000:0000:0000:0000:ffff:0a00:020f"
grep -q "$v4" "$TEST_TMPDIR/all2.dbg"/* ||
    record_failure "LOOM_IB_GID_INDEX unset: no rank logged the IPv4-mapped GID ('$v4')"
for g in 0 1; do
    PERF_ENV="LOOM_IB_GID_INDEX=$g"
    ibcase gid$g 2 1 -C all -d float -o sum $SIZES
    want="gid 0 fe80:"
    [ $g -eq 1 ] && want=$v4
    grep -q "$want" "$TEST_TMPDIR/gid$g.dbg"/* ||
        record_failure "gid$g: LOOM_IB_GID_INDEX=$g, but no rank logged '$want'"
done
PERF_ENV=

t0=$(date +%s)
# 4. Faults.
log=$TEST_TMPDIR/faults.log
# "tcp queued" is skipped: its workload relies on TCP's socket buffers (rank
# 2 sends 32 messages to rank 0 while rank 0 is outside any call); over
# verbs only the slots' worth goes before credits come back, so ranks 0 and
# 2 each wait to send to the other and time out before rank 3's death
# reaches them (seen 2026-12-07): the case does not apply over IB.
run_logged "$log" env CK_RUN_CASE=tcp LOOM_FAULT_MIN_TIMEOUT=20 LOOM_FAULT_SKIP="tcp queued" \
    "$top_builddir/tests/faults/check_faults"
status=$?
sed 's/^/    /' "$log"
[ $status -eq 0 ] || record_failure "check_faults, its across-host cases over IB: exit status $status"
[ "$(grep -c "^tcp SIGKILL .*loomRemoteError .*rank 3 (pid" "$log")" -eq 3 ] ||
    record_failure "not every survivor of rank 3's SIGKILL returned loomRemoteError naming it"
[ "$(grep -c "^tcp chain .*loomRemoteError" "$log")" -eq 3 ] ||
    record_failure "the notice of rank 3's death did not reach all three survivors"

note "faults: $(($(date +%s) - t0)) s"
t0=$(date +%s)
log=$TEST_TMPDIR/shrink.log
run_logged "$log" "$top_builddir/tests/faults/check_shrink"
status=$?
sed 's/^/    /' "$log"
[ $status -eq 0 ] || record_failure "check_shrink over IB: exit status $status"
note "shrink: $(($(date +%s) - t0)) s"

finish
