#!/bin/sh
# train.sh — the training drivers across hosts: loom-train --check under
# Open MPI's mpirun on 2 namespace hosts x 2 ranks (netns.sh), for every
# mode (ddp, zero1, zero2, zero3, moe). Shared memory carries the traffic
# inside a host and TCP between the hosts; each run is compared with the
# single-process reference and its parameters must be bitwise identical
# across ranks, as in tests/integration/train.sh. loom-train links nothing
# of MPI: the ranks join through LOOM_ROOT_ADDR (rank 0's host) and the
# rank variables mpirun sets.
#
# Then 3D parallelism on 2 hosts x 4 ranks: --heads 4 --tp 2 --pp 2 --mode
# zero1 (2 replicas), TP groups packed inside each host (the TP communicators
# on shared memory, the data-parallel ones on TCP), and again spread across
# the hosts (TP on TCP), both checked against the reference.
#
# Then ddp once more with no LOOM_ROOT_ADDR at all, as a new user would run
# it: rank 0 publishes its unique id in mpirun's PMIx store and the others
# fetch it (skipped, in one line, in a build without libpmix).
#
# Skipped, in one line, unless run as root where network namespaces work.
set -u
. "$(dirname "$0")/../integration/common.sh"
. "$(dirname "$0")/netns.sh"

LOOM_TRAIN=${LOOM_TRAIN:-$top_builddir/train/loom-train}
[ -x "$LOOM_TRAIN" ] || skip "$LOOM_TRAIN is not built (run make first)"
"$LOOM_TRAIN" -h >/dev/null 2>&1 || fail "$LOOM_TRAIN -h failed"
mn_require
trap 'mn_cleanup; rm -rf "$TEST_TMPDIR"' EXIT
trap 'mn_cleanup; rm -rf "$TEST_TMPDIR"; exit 130' INT TERM

LOOM_TEST_TIMEOUT=${LOOM_TEST_TIMEOUT:-240}
mn_hosts 2
port=29541
for mode in ddp zero1 zero2 zero3 moe; do
    log=$TEST_TMPDIR/$mode.log
    # LOOM_SPIN=0: both hosts share this machine's few CPUs (see mpirun.sh). The INIT
    # log says how many hosts the communicator spans.
    run_logged "$log" "$MN_MPIRUN" 2 2 -x LOOM_TIMEOUT=120 -x LOOM_SPIN=0 \
        -x LOOM_DEBUG=INFO -x LOOM_DEBUG_SUBSYS=INIT -x LOOM_ROOT_ADDR="$(mn_addr h1):$port" \
        "$LOOM_TRAIN" --mode "$mode" --check --steps 20 --log-every 10
    if train_check "$log" $? "$mode on 2 hosts x 2 ranks" 20; then
        grep -q "4 ranks on 2 hosts, 2 on this one (h2)" "$log" ||
            record_failure "$mode: the ranks did not span hosts h1 and h2"
    fi
    port=$((port + 1))
done

for placement in packed spread; do
    log=$TEST_TMPDIR/3d-$placement.log
    run_logged "$log" "$MN_MPIRUN" 2 4 -x LOOM_TIMEOUT=120 -x LOOM_SPIN=0 \
        -x LOOM_ROOT_ADDR="$(mn_addr h1):$port" "$LOOM_TRAIN" --heads 4 --tp 2 --pp 2 \
        --mode zero1 --microbatches 4 --placement $placement --check --steps 10 --log-every 10
    if train_check "$log" $? "3D ($placement) on 2 hosts x 4 ranks" 10; then
        if [ $placement = packed ]; then
            grep -q "placement packed: every TP group inside one host" "$log" &&
                [ "$(grep -c "tp communicator of 2: .* shm (host h[12]); ring 0 1; tree " "$log")" -eq 8 ] &&
                [ "$(grep -c "dp communicator of 2: .* net/socket (host h[12]); ring 0 1; tree " "$log")" -eq 8 ] ||
                record_failure "3D packed: TP not on shared memory inside hosts, DP not on TCP"
        else
            grep -q "placement spread: TP groups across hosts" "$log" &&
                [ "$(grep -c "tp communicator of 2: .* net/socket" "$log")" -eq 8 ] ||
                record_failure "3D spread: the TP groups did not cross the hosts"
        fi
    fi
    port=$((port + 1))
done

if "$top_builddir/tools/loom-info" 2>/dev/null | grep -q "pmix=yes"; then
    log=$TEST_TMPDIR/ddp-pmix.log
    run_logged "$log" env -u LOOM_ROOT_ADDR "$MN_MPIRUN" 2 2 -x LOOM_TIMEOUT=120 -x LOOM_SPIN=0 \
        -x LOOM_DEBUG=INFO -x LOOM_DEBUG_SUBSYS=INIT "$LOOM_TRAIN" --mode ddp --check --steps 20 \
        --log-every 10
    if train_check "$log" $? "ddp on 2 hosts x 2 ranks, no LOOM_ROOT_ADDR (PMIx)" 20; then
        [ "$(grep -c "unique id from rank 0 through PMIx" "$log")" -eq 4 ] ||
            record_failure "ddp-pmix: not every rank took the unique id from PMIx"
        grep -q "4 ranks on 2 hosts, 2 on this one (h2)" "$log" ||
            record_failure "ddp-pmix: the ranks did not span hosts h1 and h2"
    fi
else
    note "ddp with no LOOM_ROOT_ADDR skipped: this Loom was built without libpmix"
fi
finish
