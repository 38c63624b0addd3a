#!/bin/sh
# rails.sh — one TCP connection striped over two interfaces (rails).
#
# Two namespace hosts (netns.sh), each with eth0 on one bridge and eth1 on
# another (mn_rail2): two networks, as two NICs on two switches. With
# LOOM_SOCKET_IFNAME=eth0,eth1 every rank listens on both and each peer
# connection puts its sockets on both, socket s on rail s % 2.
#
# 1. Striping: the correctness matrix of loom-perf (every collective,
#    datatype, operation and root, exact results) on 2 hosts x 1 rank, then
#    large AllReduces (1-32 MiB, checked); LOOM_DEBUG=INFO says the rank
#    listens on both rails, and each host's eth1 and eth0 both sent at least
#    32 MiB (/sys/class/net/*/statistics/tx_bytes in its namespace): the
#    large messages were cut over both.
# 2. Failover: railloop (AllReduces of 4 MiB in a loop, every result
#    checked) on 2 hosts x 1 rank; after its 20th iteration eth1 goes down
#    on h1 (ip link set eth1 down). h1 finds its interface down, both ends
#    drop the sockets on that rail (h1 tells h2 on eth0) and resend what had
#    not landed on eth0: every rank warns that rail 1 (eth1) failed (h2
#    hears it from h1), the job ends with every result right, and eth0 of
#    each host sent at least 64 MiB more after the failure.
# 3. A dead peer over two rails: railloop forked on h1 and h2 (not under
#    mpirun, which would end the survivor itself), rank 1 killed after its
#    20th iteration: rank 0 returns an error naming rank 1 well within
#    LOOM_TIMEOUT (60 s), as on one rail.
#
# Skipped, in one line, unless run as root where network namespaces work.
# The namespaces are removed on exit, whatever happened.
# shellcheck disable=SC2086 # ALL, SIZES are word lists, split on purpose
set -u
. "$(dirname "$0")/../integration/common.sh"
. "$(dirname "$0")/netns.sh"

require_tools loom-perf
mn_require
trap 'mn_cleanup; rm -rf "$TEST_TMPDIR"' EXIT
trap 'mn_cleanup; rm -rf "$TEST_TMPDIR"; exit 130' INT TERM

LOOM_TEST_TIMEOUT=${LOOM_TEST_TIMEOUT:-240}
ALL="-C all -d all -o all -r all"
SIZES="-b 4 -e 70000 -f 7"
ENVS="-x LOOM_TIMEOUT=60 -x LOOM_SPIN=0 -x LOOM_SOCKET_IFNAME=eth0,eth1"
MIN_BYTES=$((32 << 20))

mn_hosts 2
mn_rail2 2
port=29531

# tx_bytes HOST IF: what HOST's interface IF has sent so far.
tx_bytes() {
    ip netns exec "$MN_PREFIX-$1" cat "/sys/class/net/$2/statistics/tx_bytes"
}

# 1. Striping.
before="$(tx_bytes h1 eth0) $(tx_bytes h1 eth1) $(tx_bytes h2 eth0) $(tx_bytes h2 eth1)"
log=$TEST_TMPDIR/matrix.log
run_logged "$log" "$MN_MPIRUN" 2 1 $ENVS -x LOOM_ROOT_ADDR="$(mn_addr h1):$port" -x LOOM_DEBUG=INFO \
    -x LOOM_DEBUG_SUBSYS=NET -x LOOM_DEBUG_FILE="$TEST_TMPDIR/info-%h-%p.log" "$LOOM_PERF" -c 1 -n 1 \
    -w 0 $ALL $SIZES
perf_check "$log" $? "2x1 over two rails, the matrix"
cat "$TEST_TMPDIR"/info-*.log >"$TEST_TMPDIR/info.log" 2>/dev/null
for h in h1 h2; do
    grep -q "^$h:.*NET/socket: listening on eth0 (.*), eth1 (.*), .*striped over these rails" "$TEST_TMPDIR/info.log" ||
        record_failure "$h did not say it listens on both rails" && show_log "$TEST_TMPDIR/info.log"
done
port=$((port + 1))
log=$TEST_TMPDIR/large.log
run_logged "$log" "$MN_MPIRUN" 2 1 $ENVS -x LOOM_ROOT_ADDR="$(mn_addr h1):$port" "$LOOM_PERF" -c 1 \
    -n 2 -w 0 -b 1M -e 32M -f 4
perf_check "$log" $? "2x1 over two rails, AllReduce 1-32 MiB"
after="$(tx_bytes h1 eth0) $(tx_bytes h1 eth1) $(tx_bytes h2 eth0) $(tx_bytes h2 eth1)"
set -- $after
for name in h1:eth0 h1:eth1 h2:eth0 h2:eth1; do
    b=$(echo "$before" | cut -d' ' -f1)
    before=$(echo "$before" | cut -d' ' -f2-)
    sent=$(($1 - b))
    shift
    if [ "$sent" -lt "$MIN_BYTES" ]; then
        record_failure "$name sent $sent bytes, under $MIN_BYTES: that rail carried no share"
    else
        note "$name sent $sent bytes"
    fi
done

# 2. Failover: a rail taken down mid-job.
RAILLOOP=$top_builddir/tests/multinode/railloop
[ -x "$RAILLOOP" ] || skip "$RAILLOOP is not built (run make check)"
port=$((port + 1))
log=$TEST_TMPDIR/failover.log
: >"$log"
"$MN_MPIRUN" 2 1 $ENVS -x LOOM_ROOT_ADDR="$(mn_addr h1):$port" -x LOOM_DEBUG=WARN \
    "$RAILLOOP" 300 $((4 << 20)) >"$log" 2>&1 &
job=$!
waited=0
while ! grep -q "rank 0: iteration 20$" "$log" && [ "$waited" -lt 1200 ]; do
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
    waited=$((waited + 1))
done
if grep -q "rank 0: iteration 20$" "$log"; then
    ip -n "$MN_PREFIX-h1" link set eth1 down
    down="$(tx_bytes h1 eth0) $(tx_bytes h2 eth0)"
    note "eth1 of h1 is down after iteration 20"
else
    record_failure "railloop did not reach its 20th iteration"
fi
wait "$job"
status=$?
sed 's/^/    /' "$log"
[ "$status" -eq 0 ] || record_failure "railloop with a rail taken down: exit status $status"
[ "$(grep -c "every result right" "$log")" -eq 2 ] ||
    record_failure "not every rank got every result right after the rail went down"
for h in h1 h2; do
    grep -q "^$h:.*WARN.*rail 1 (eth1) failed .*; the other rail(s) carry on" "$log" ||
        record_failure "$h did not warn that rail 1 (eth1) failed"
done
if [ -n "${down:-}" ]; then
    set -- $down
    for name in h1 h2; do
        sent=$(($(tx_bytes "$name" eth0) - $1))
        shift
        [ "$sent" -ge $((64 << 20)) ] ||
            record_failure "$name's eth0 sent only $sent bytes after eth1 went down"
    done
fi

# 3. A dead peer over two rails: rank 1 (h2) killed mid-job.
port=$((port + 1))
log=$TEST_TMPDIR/kill.log
: >"$log"
for r in 0 1; do
    $MN_EXEC "h$((r + 1))" env LOOM_RANK=$r LOOM_NRANKS=2 LOOM_LOCAL_RANK=0 LOOM_TIMEOUT=60 \
        LOOM_SPIN=0 LOOM_SOCKET_IFNAME=eth0,eth1 LOOM_ROOT_ADDR="$(mn_addr h1):$port" \
        "$RAILLOOP" 100000 $((4 << 20)) >"$log.$r" 2>&1 &
    eval "pid$r=\$!"
done
waited=0
while ! grep -q "rank 1: iteration 20$" "$log.1" && [ "$waited" -lt 1200 ]; do
    sleep 0.1
    waited=$((waited + 1))
done
start=$(date +%s)
for p in $(ip netns pids "$MN_PREFIX-h2"); do
    kill -9 "$p" 2>/dev/null
done
wait "$pid0"
status=$?
took=$(($(date +%s) - start))
wait "$pid1" 2>/dev/null
cat "$log.0" "$log.1" | grep -v "iteration [0-9]*$" | sed 's/^/    /'
if [ "$status" -ne 1 ]; then
    record_failure "rank 0 ended with status $status when rank 1 was killed (1 expected)"
elif ! grep -q "railloop: rank 0: iteration .*rank 1" "$log.0"; then
    record_failure "rank 0's error does not name rank 1"
elif [ "$took" -ge 30 ]; then
    record_failure "rank 0 took $took s to see rank 1 die (LOOM_TIMEOUT is 60 s)"
else
    note "rank 0 returned an error naming rank 1 ${took} s after it was killed"
fi

finish
