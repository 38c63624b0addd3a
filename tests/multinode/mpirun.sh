#!/bin/sh
# mpirun.sh — Loom across hosts, launched by Open MPI's mpirun.
#
# The hosts are network namespaces on this machine (netns.sh): each has its
# own hostname, loopback and eth0 on a private bridge, so Loom puts shared
# memory inside a host and TCP between hosts, exactly as on real machines.
#
# 1. loom-info --comm on 2 hosts x 2 ranks: the ring visits each host's ranks
#    in a row, links inside a host are shm and across hosts net/socket, and
#    LOOM_DEBUG=INFO says so (NET: rank a -> rank b (host): TCP) and says
#    once per rank why InfiniBand is not used.
# 2. The correctness matrix of loom-perf (every collective, datatype,
#    operation and root, in and out of place, exact results) on 2 x 2 and
#    3 x 2, with LOOM_ALGO=ring and LOOM_ALGO=tree, the unique id handed out
#    by MPI_Bcast (when the tools are built with MPI).
# 3. The same on 3 x 2 without MPI: LOOM_ROOT_ADDR names rank 0's host, and
#    the ranks find themselves from OMPI_COMM_WORLD_RANK/SIZE; ranks placed
#    round robin (--map-by node), so topology must regroup them by host; 1 MiB
#    FIFOs (not 4 MiB: messages wrap them) and 4 sockets per connection with a
#    helper thread, so that the largest messages are cut into parts.
#    3b: the matrix on 2 x 1 with LOOM_SPIN unset (every other run here sets
#    0): network waits then poll their sockets without sleeping first.
# 4. No missed wake-ups: 4 hosts x 1 rank, 1000 8-byte AllReduces through
#    the tree, LOOM_DEBUG=INFO. At destroy each rank says how many of its
#    executor's and its network proxy's sleeps ran to their 100 ms cap and
#    then found work waiting: a wake-up that nobody gave. Their sum must be
#    at most 4, one a rank (a thread preempted right as its cap expires,
#    say at the first call after init, is counted too). Until the executor's
#    kick rang the proxy when it could not take the lock, this setup counted
#    108 of them, and such calls averaged 2.5-14 ms, not 0.5.
#
# Skipped, in one line, unless run as root where network namespaces work.
# The namespaces are removed on exit, whatever happened.
# shellcheck disable=SC2086 # ALL, SIZES are word lists, split on purpose
set -u
. "$(dirname "$0")/../integration/common.sh"
. "$(dirname "$0")/netns.sh"

require_tools loom-perf loom-info
mn_require
trap 'mn_cleanup; rm -rf "$TEST_TMPDIR"' EXIT
trap 'mn_cleanup; rm -rf "$TEST_TMPDIR"; exit 130' INT TERM

LOOM_TEST_TIMEOUT=${LOOM_TEST_TIMEOUT:-240}
ALL="-C all -d all -o all -r all"
# 4 .. 67228 bytes: odd counts, and one message over 64 KiB that TCP cuts into parts.
SIZES="-b 4 -e 70000 -f 7"
# LOOM_SPIN=0: all the hosts share this machine's few CPUs, where busy polling only slows
# the other ranks down.
ENVS="-x LOOM_TIMEOUT=60 -x LOOM_SPIN=0"

mn_hosts 4
if "$LOOM_INFO" | grep -q "MPI_Bcast under mpirun: yes"; then
    BOOT="MPI_Bcast"
    BOOT_ENV=""
else
    note "the tools are built without MPI: every run joins through LOOM_ROOT_ADDR"
    BOOT="LOOM_ROOT_ADDR"
    BOOT_ENV="-x LOOM_ROOT_ADDR=$(mn_addr h1):29517"
fi

# 1. Hosts, ring, transports.
log=$TEST_TMPDIR/comm.log
run_logged "$log" "$MN_MPIRUN" 2 2 $ENVS $BOOT_ENV -x LOOM_DEBUG=INFO -x LOOM_DEBUG_SUBSYS=NET,INIT,SHM \
    "$LOOM_INFO" --comm
if comm_check "$log" $? "2 hosts x 2 ranks" 4 "host 0  h1 .*ranks 0 1$" "host 1  h2 .*ranks 2 3$" \
    "Ring: 0 1 2 3$" "  0 -> 1  shm$" "  1 -> 2  net/socket$" "  2 -> 3  shm$" \
    "  3 -> 0  net/socket$" "NET: rank 1 -> rank 2 (h2): TCP" "NET: rank 2 -> rank 1 (h1): TCP" \
    "^h1:.*INFO SHM shm: 2 local ranks" "^h2:.*INFO SHM shm: 2 local ranks"; then
    grep -q "NET: rank 0 -> rank 1" "$log" && record_failure "ranks 0 and 1 share h1 but use the network"
    grep "^Tree\|^  [0-9]  " "$log" | sed 's/^/    /'
fi

# 2. The matrix, ring and tree, on 2 x 2 and 3 x 2.
for hosts in "2 2" "3 2"; do
    for algo in ring tree; do
        log=$TEST_TMPDIR/matrix-$algo-$(echo $hosts | tr ' ' x).log
        run_logged "$log" "$MN_MPIRUN" $hosts $ENVS $BOOT_ENV -x LOOM_ALGO=$algo "$LOOM_PERF" -c 1 \
            -n 1 -w 0 $ALL $SIZES
        perf_check "$log" $? "$(echo $hosts | tr ' ' x) hosts x ranks, LOOM_ALGO=$algo, $BOOT"
    done
done

# 3. Without MPI, ranks round robin, small FIFOs, 4 sockets per connection.
log=$TEST_TMPDIR/rootaddr.log
run_logged "$log" "$MN_MPIRUN" 3 2 --map-by node $ENVS -x LOOM_ROOT_ADDR="$(mn_addr h1):29518" \
    -x LOOM_BUFFSIZE=1M -x LOOM_SOCKET_NSOCKS=4 -x LOOM_SOCKET_NTHREADS=1 "$LOOM_PERF" -c 1 -n 1 \
    -w 0 $ALL $SIZES
perf_check "$log" $? "3x2 round robin, LOOM_ROOT_ADDR, LOOM_BUFFSIZE=1M, 4 sockets, 1 helper"
grep -q "Rank  1 Pid .* on h2" "$log" || record_failure "--map-by node did not put rank 1 on h2"

# 3b. The library's own waiting (LOOM_SPIN unset, as a user runs it): a wait on a network link
# polls its sockets without sleeping for up to 100 us before it blocks in poll().
log=$TEST_TMPDIR/spin.log
run_logged "$log" "$MN_MPIRUN" 2 1 -x LOOM_TIMEOUT=60 $BOOT_ENV "$LOOM_PERF" -c 1 -n 1 -w 0 $ALL $SIZES
perf_check "$log" $? "2x1, LOOM_SPIN unset"

# 4. Missed wake-ups.
log=$TEST_TMPDIR/wakeups.log
run_logged "$log" "$MN_MPIRUN" 4 1 $ENVS $BOOT_ENV -x LOOM_ALGO=tree -x LOOM_DEBUG=INFO \
    -x LOOM_DEBUG_SUBSYS=INIT,NET -x LOOM_DEBUG_FILE="$TEST_TMPDIR/wake-%h-%p.log" "$LOOM_PERF" \
    -c 1 -n 1000 -w 10 -b 8 -e 8
perf_check "$log" $? "4x1, 1000 8-byte AllReduces through the tree"
cat "$TEST_TMPDIR"/wake-*.log >"$TEST_TMPDIR/wake.log" 2>/dev/null
execs=$(grep -c "sleeps ran to the 100 ms cap and then found work" "$TEST_TMPDIR/wake.log")
proxies=$(grep -c "NET: the proxy slept .* ran to the 100 ms cap" "$TEST_TMPDIR/wake.log")
missed=$(sed -n 's/.* \([0-9][0-9]*\) of \(its sleeps\|them\) ran to the 100 ms cap.*/\1/p' \
    "$TEST_TMPDIR/wake.log" | awk '{s += $1} END {print s + 0}')
if [ "$execs" -ne 4 ] || [ "$proxies" -ne 4 ]; then
    record_failure "4x1: expected 4 executor and 4 proxy wake-up counts, found $execs and $proxies"
    show_log "$TEST_TMPDIR/wake.log"
elif [ "$missed" -gt 4 ]; then
    record_failure "4x1: $missed sleeps ran to their cap with work waiting (missed wake-ups)"
    grep "ran to the 100 ms cap" "$TEST_TMPDIR/wake.log" | sed 's/^/    /'
else
    note "4x1 tree, 8 B: $missed missed wake-ups in the executors and proxies"
fi

finish
