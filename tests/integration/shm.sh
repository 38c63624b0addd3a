#!/bin/sh
# shm.sh — the shared-memory transport leaves nothing behind and says what to
# do when /dev/shm is too small.
#
# 1. After a clean run and after a run where a rank is SIGKILLed mid-way,
#    /dev/shm holds no loom-<pid>-* segment of any of the job's ranks
#    (segments are unlinked as soon as every peer has mapped them).
# 2. In a private mount namespace whose /dev/shm is a 1 MiB tmpfs (unshare -m,
#    root only), init fails with a line giving the size needed and the way
#    out, and the tool exits non-zero instead of crashing.
set -u
. "$(dirname "$0")/common.sh"
require_tools loomrun loom-perf

# Segments are named /dev/shm/loom-<pid>-<random>. Other jobs (tests running
# in parallel) may hold segments of their own at any moment, so only those of
# this job's ranks count: their pids are in the prefix of the INIT log lines.
export LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=INIT
segments() {
    _n=0
    for _pid in $(sed -n 's/^[^:]*:\([0-9][0-9]*\):[0-9-]* \[LOOM\] INFO.*/\1/p' "$1" | sort -u); do
        _n=$((_n + $(ls /dev/shm 2>/dev/null | grep -c "^loom-$_pid-" || true)))
    done
    echo "$_n"
}
ranks_seen() {
    sed -n 's/^[^:]*:\([0-9][0-9]*\):[0-9-]* \[LOOM\] INFO.*/\1/p' "$1" | sort -u | wc -l
}

run_logged "$TEST_TMPDIR/clean.log" "$LOOMRUN" -n 4 "$LOOM_PERF" -G 0 -C allreduce -b 1M -e 1M -n 2 -w 1 ||
    { show_log "$TEST_TMPDIR/clean.log"; record_failure "a clean 4-rank run failed"; }
[ "$(ranks_seen "$TEST_TMPDIR/clean.log")" -ge 4 ] || record_failure "the log names fewer than 4 rank pids"
[ "$(segments "$TEST_TMPDIR/clean.log")" -eq 0 ] || record_failure "segments left in /dev/shm after a clean run"

# Rank 2 is killed while the others loop on large AllReduces.
cat >"$TEST_TMPDIR/victim.sh" <<EOS
#!/bin/sh
if [ "\$LOOM_RANK" = 2 ]; then
    ( sleep 1; kill -9 \$\$ ) &
fi
exec "$LOOM_PERF" -G 0 -C allreduce -b 8M -e 8M -n 100000 -w 0 -c 0
EOS
chmod +x "$TEST_TMPDIR/victim.sh"
LOOM_TIMEOUT=20 run_logged "$TEST_TMPDIR/kill.log" "$LOOMRUN" -n 4 "$TEST_TMPDIR/victim.sh"
status=$?
[ "$status" -ne 0 ] || record_failure "loomrun exited 0 although rank 2 was killed"
grep -q "rank 2" "$TEST_TMPDIR/kill.log" || { show_log "$TEST_TMPDIR/kill.log"; record_failure "loomrun did not name rank 2"; }
[ "$(segments "$TEST_TMPDIR/kill.log")" -eq 0 ] || record_failure "segments left in /dev/shm after a rank was killed"

if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null 2>&1; then
    note "skipped the small /dev/shm case: needs root and unshare(1) for a private mount namespace"
else
    cat >"$TEST_TMPDIR/small.sh" <<EOS
#!/bin/sh
mount -t tmpfs -o size=1m tmpfs /dev/shm || exit 77
LOOM_BUFFSIZE=4M exec "$LOOMRUN" -n 2 "$LOOM_PERF" -G 0 -C allreduce -b 8 -e 8 -n 1 -w 0
EOS
    chmod +x "$TEST_TMPDIR/small.sh"
    run_logged "$TEST_TMPDIR/small.log" unshare -m "$TEST_TMPDIR/small.sh"
    status=$?
    if [ "$status" -eq 77 ]; then
        note "skipped the small /dev/shm case: cannot mount a tmpfs here"
    elif [ "$status" -eq 0 ]; then
        record_failure "a run with a 1 MiB /dev/shm and 4 MiB FIFOs succeeded"
    elif ! grep -q "/dev/shm has .* free, this communicator needs .*LOOM_BUFFSIZE" "$TEST_TMPDIR/small.log"; then
        show_log "$TEST_TMPDIR/small.log"
        record_failure "no clear message about /dev/shm being too small"
    fi
fi
finish
