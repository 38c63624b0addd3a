#!/bin/sh
# faults.sh — faults across hosts: tests/faults/check_faults, case "tcp", on
# namespace hosts (netns.sh) instead of LOOM_HOSTID hosts over loopback.
#
# 2 hosts x 2 ranks, shared memory inside a host and TCP over the bridge
# between them (each rank enters h1 or h2 itself, see check_faults.c):
#   tcp SIGKILL  rank 3 (h2) killed in a loop of 8 MiB AllReduces: every
#                survivor, on both hosts, returns loomRemoteError naming
#                rank 3 and h2, long before LOOM_TIMEOUT (30 s); abort or
#                destroy then return
#   tcp SIGSTOP  rank 1 (h1) stopped: the others return loomTimeout after
#                LOOM_TIMEOUT (5 s)
#   tcp chain    ranks 0 and 1 (h1) wait on live ranks while rank 3 (h2) is
#                killed: they hear of it from rank 2 over the network
#                (loomRemoteError), not by their own 60 s timeout
#   tcp queued   rank 2 (h2) stops on rank 3's death while rank 0 (h1) has
#                not read what rank 2 sent it: rank 0 still names rank 3
#                (the notice does not wait behind that data)
# and no /dev/shm segment of any rank is left. The ranks are forked by the
# test, not started by mpirun: mpirun ends the whole job as soon as one rank
# dies, before the survivors could say what they saw.
#
# Skipped, in one line, unless run as root where network namespaces work.
set -u
. "$(dirname "$0")/../integration/common.sh"
. "$(dirname "$0")/netns.sh"

CHECK_FAULTS=$top_builddir/tests/faults/check_faults
[ -x "$CHECK_FAULTS" ] || skip "$CHECK_FAULTS is not built (run make check)"
mn_require
trap 'mn_cleanup; rm -rf "$TEST_TMPDIR"' EXIT
trap 'mn_cleanup; rm -rf "$TEST_TMPDIR"; exit 130' INT TERM

mn_hosts 2
log=$TEST_TMPDIR/faults.log
run_logged "$log" env LOOM_FAULT_NETNS="$MN_PREFIX" LOOM_SOCKET_IFNAME=eth0 LOOM_SPIN=0 \
    CK_RUN_CASE=tcp "$CHECK_FAULTS"
status=$?
sed 's/^/    /' "$log"
[ "$status" -eq 0 ] || record_failure "check_faults on namespace hosts: exit status $status"
grep -q "^tcp SIGKILL .* on h2)" "$log" || record_failure "no survivor named rank 3's host h2"
[ "$(grep -c "^tcp chain .*loomRemoteError" "$log")" -eq 3 ] ||
    record_failure "the chain case did not end on all three survivors with loomRemoteError"
[ "$(grep -c "^tcp queued .*loomRemoteError.*rank 3 (pid" "$log")" -eq 3 ] ||
    record_failure "the queued case did not end on all three survivors naming rank 3"
finish
