#!/bin/sh
# net.sh — the network transport on one machine, without root.
#
# LOOM_HOSTID, set per rank by a wrapper, makes ranks of one machine
# believe they are on different hosts, so links between those "hosts" go
# over TCP while ranks of one "host" use shared memory; LOOM_SHM_DISABLE=1
# puts every link, a rank's link to itself included, on the network.
#
# 1. loom-info --comm on 2 fake hosts x 2 ranks names shm and net/socket
#    links where they belong; LOOM_DEBUG=INFO says once per rank that
#    InfiniBand is not used and why, and how many sockets a connection and
#    helper threads TCP chose and why (or that LOOM_SOCKET_NSOCKS and
#    LOOM_SOCKET_NTHREADS said).
# 2. loom-perf's exact checks of every collective over mixed shm/TCP links
#    (2 x 2, 2 channels, small FIFOs), through the double binary tree
#    (LOOM_ALGO=tree, 3 x 2: a tree over hosts, a chain in each), over TCP
#    only (3 ranks), and with large messages cut over 4 sockets moved by 2
#    helper threads; the last message of a sender that leaves at once, over
#    2 and 4 sockets, arrives whole, and both ranks say socket 0 carries
#    both directions (duplex: one rail, no TLS);
#    large messages sent from the caller's buffer arrive whole when a
#    later step of the call overwrites it (recursive doubling in place) and
#    when the caller overwrites and unmaps it the moment the call returns
#    (lastsend --reuse).
# 3. Errors say what to do: LOOM_SOCKET_IFNAME matching nothing lists the
#    interfaces; LOOM_NET=ib without a device names the rank; a rank killed
#    mid-run is reported by its peers as a closed connection, not a hang.
# shellcheck disable=SC2086 # ALL, SIZES are word lists, split on purpose
set -u
. "$(dirname "$0")/common.sh"
require_tools loomrun loom-perf loom-info

LOOM_TIMEOUT=${LOOM_TIMEOUT:-60}
# Every rank shares this machine's few CPUs: busy polling would only slow the others.
LOOM_SPIN=0
export LOOM_TIMEOUT LOOM_SPIN
ALL="-C all -d all -o all -r all"
SIZES="-b 4 -e 70000 -f 7"

fakehost_init

# 1. Links and the INFO lines.
log=$TEST_TMPDIR/comm.log
LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=NET run_logged "$log" "$LOOMRUN" -n 4 "$FAKE" 2 "$LOOM_INFO" --comm
comm_check "$log" $? "2 fake hosts x 2 ranks" 4 "Communicator: 4 ranks on 2 host" \
    "  0 -> 1  shm$" "  1 -> 2  net/socket$" "  3 -> 0  net/socket$" "NET: rank 0 -> rank 2 (.*): TCP"
# Two ranks a fake host share its cores: the choice is told, with the speed and the cores.
if ! grep -q "NET/socket: listening on .*; [2-8] socket(s) a connection (.* Mbit/s, a socket per 10 Gbit/s, 2..8), [0-9]* helper thread(s) ([0-9]* core(s) a rank on this host" "$log"; then
    record_failure "NET/socket does not say what it chose for sockets and helpers, and why"
    show_log "$log"
fi

# 2. Exact results.
log=$TEST_TMPDIR/mixed.log
LOOM_NCHANNELS=2 LOOM_BUFFSIZE=16K run_logged "$log" "$LOOMRUN" -n 4 --timeout 240 "$FAKE" 2 \
    "$LOOM_PERF" -c 1 -n 1 -w 0 $ALL $SIZES
perf_check "$log" $? "2 fake hosts x 2 ranks, 2 channels, 16K FIFOs"

# The double binary tree across 3 fake hosts (a chain of 2 ranks inside each), pieces of 2 KiB.
log=$TEST_TMPDIR/tree.log
LOOM_ALGO=tree LOOM_BUFFSIZE=16K run_logged "$log" "$LOOMRUN" -n 6 --timeout 240 "$FAKE" 2 \
    "$LOOM_PERF" -c 1 -n 1 -w 0 $ALL $SIZES
perf_check "$log" $? "3 fake hosts x 2 ranks, LOOM_ALGO=tree, 16K FIFOs"

log=$TEST_TMPDIR/tcponly.log
LOOM_SHM_DISABLE=1 run_logged "$log" "$LOOMRUN" -n 3 --timeout 240 "$LOOM_PERF" -c 1 -n 1 -w 0 \
    -C all -d float -o all -r all $SIZES
perf_check "$log" $? "3 ranks, LOOM_SHM_DISABLE=1 (every link on TCP)"

log=$TEST_TMPDIR/split.log
LOOM_SOCKET_NSOCKS=4 LOOM_SOCKET_NTHREADS=2 LOOM_BUFFSIZE=4M run_logged "$log" "$LOOMRUN" -n 3 \
    --timeout 240 "$FAKE" 1 "$LOOM_PERF" -c 1 -n 2 -w 1 -C all -d float -b 1M -e 4M -f 4
perf_check "$log" $? "3 fake hosts, 4 sockets and 2 helper threads, 1-4 MiB"

# A step that overwrites memory a message still to send points to: in place, recursive
# doubling sends the whole vector and writes the sum over it once the partner's has come,
# while its own may still wait in the buffer for the socket (8 MiB slots, more than the
# kernel takes at once). Without taking it back first, 4-32 MiB in place came out wrong.
log=$TEST_TMPDIR/overwrite.log
LOOM_SHM_DISABLE=1 LOOM_ALGO=doubling LOOM_BUFFSIZE=64M run_logged "$log" "$LOOMRUN" -n 2 \
    --timeout 240 "$LOOM_PERF" -c 1 -n 3 -w 0 -C allreduce -d float -b 4M -e 32M -f 2
perf_check "$log" $? "2 ranks over TCP, LOOM_ALGO=doubling in place, 8 MiB slots"

# lastsend_check LOG STATUS ARRIVED WHAT INFO INFO_WHAT: the run in LOG exited 0 and said
# ARRIVED (else "WHAT" is the failure), and its INFO lines say INFO (else "INFO_WHAT").
lastsend_check() {
    if [ "$2" -ne 0 ] || ! grep -q "$3" "$1"; then
        record_failure "$4"
        show_log "$1"
    elif ! grep -q "$5" "$1"; then
        record_failure "$6"
        show_log "$1"
    fi
}

# What a sender sent before it left arrives, however many sockets carry it: rank 1 is
# stopped while rank 0 sends 256 KiB and exits, so rank 1 then finds each socket's end
# behind its data at once, the end of socket 0 before the rest of the message on the others.
# Large messages go to the socket from the caller's buffer, and a call must not return while
# anything still reads it: with rank 1 stopped, rank 0 sends 32 MiB and broadcasts 32 MiB
# (8 MiB slots: both return at once) and overwrites and unmaps each buffer as soon as the
# call returns; rank 1 then checks every byte. The INFO line says rank 0 sent from its
# buffers and copied into the slots what the kernel had not taken yet.
for split in "2 0" "4 2"; do
    set -- $split
    log=$TEST_TMPDIR/lastsend$1.log
    LOOM_SHM_DISABLE=1 LOOM_SOCKET_NSOCKS=$1 LOOM_SOCKET_NTHREADS=$2 LOOM_DEBUG=INFO \
        LOOM_DEBUG_SUBSYS=NET run_logged "$log" "$LOOMRUN" -n 2 \
        "$top_builddir/tests/integration/lastsend" 262144
    if [ $? -ne 0 ] || ! grep -q "rank 1: all 262144 bytes arrived" "$log"; then
        record_failure "a message over $1 sockets lost its end when the sender left ($2 helper threads)"
        show_log "$log"
    elif ! grep -q "$1 socket(s) a connection (LOOM_SOCKET_NSOCKS), $2 helper thread(s) (LOOM_SOCKET_NTHREADS)" "$log"; then
        record_failure "LOOM_SOCKET_NSOCKS=$1 LOOM_SOCKET_NTHREADS=$2 are not what NET/socket says it took"
        show_log "$log"
    elif [ "$(grep -c "socket 0 of each channel carries both directions (duplex)" "$log")" -ne 2 ]; then
        record_failure "over one rail without TLS, the two ranks do not both say socket 0 is duplex"
        show_log "$log"
    fi
    log=$TEST_TMPDIR/reuse$1.log
    LOOM_SHM_DISABLE=1 LOOM_ALGO=ring LOOM_BUFFSIZE=64M LOOM_SOCKET_NSOCKS=$1 \
        LOOM_SOCKET_NTHREADS=$2 LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=NET run_logged "$log" \
        "$LOOMRUN" -n 2 "$top_builddir/tests/integration/lastsend" --reuse 33554432
    lastsend_check "$log" $? "rank 1: both calls' 33554432 bytes arrived whole" \
        "a buffer reused as its call returned changed what arrived ($1 sockets, $2 helper threads)" \
        "rank 0 sent [0-9]* message(s), .* MiB, from the caller's memory; [1-9][0-9.]* MiB of it was copied" \
        "rank 0 did not send from its buffers and copy the rest back as the calls returned ($1 sockets)"
done

# 3. Errors.
log=$TEST_TMPDIR/ifname.log
LOOM_SOCKET_IFNAME==nosuchif0 run_logged "$log" "$LOOMRUN" -n 2 "$LOOM_PERF" -b 8 -e 8
if [ $? -eq 0 ]; then
    record_failure "LOOM_SOCKET_IFNAME=nosuchif0 did not fail"
elif ! grep -q "LOOM_SOCKET_IFNAME==nosuchif0 matches no interface .*this host has: .*lo" "$log"; then
    record_failure "no clear message for a LOOM_SOCKET_IFNAME that matches nothing"
    show_log "$log"
fi

log=$TEST_TMPDIR/ib.log
LOOM_NET=ib run_logged "$log" "$LOOMRUN" -n 2 "$FAKE" 1 "$LOOM_PERF" -b 8 -e 8
if [ $? -eq 0 ]; then
    note "LOOM_NET=ib worked: this machine has an InfiniBand device"
elif ! grep -q "asks for InfiniBand (LOOM_NET=ib).*unset LOOM_NET" "$log"; then
    record_failure "no clear message for LOOM_NET=ib without a device"
    show_log "$log"
fi

# Ranks started by hand (as a launcher would, through LOOM_ROOT_ADDR), so that
# nobody stops the survivors when rank 1 is killed: they must say who left.
port=$((20000 + $$ % 20000))
pids=""
for r in 0 1 2; do
    OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=3 LOOM_ROOT_ADDR=127.0.0.1:$port LOOM_HOSTID=fake$r \
        LOOM_TIMEOUT=30 "$LOOM_PERF" -C allreduce -b 4M -e 4M -n 100000 -w 0 -c 0 -z 1 \
        >"$TEST_TMPDIR/kill$r.log" 2>&1 &
    pids="$pids $!"
done
# LOOM_TIMEOUT ends a hang; the watchdog ends these three should that fail too.
(
    trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
    sleep 120 &
    sleeper=$!
    wait "$sleeper" && kill -9 $pids
) >/dev/null 2>&1 &
watchdog=$!
sleep 3
kill -9 "$(echo $pids | cut -d' ' -f2)"
for pid in $pids; do
    wait "$pid"
done
kill "$watchdog" 2>/dev/null
if ! grep -q "rank 1 (pid [0-9]* on .*) closed its connection" "$TEST_TMPDIR/kill0.log" \
    "$TEST_TMPDIR/kill2.log"; then
    record_failure "neither survivor reported rank 1's closed connection"
    show_log "$TEST_TMPDIR/kill0.log"
    show_log "$TEST_TMPDIR/kill2.log"
fi

finish
