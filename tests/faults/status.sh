#!/bin/sh
# status.sh — the flight recorder read back: loom-info --status on live jobs
# that hang, the table a rank that times out prints, and the files
# LOOM_DUMP_DIR holds after a failure (tests/faults/stuck.c makes the jobs,
# 3 ranks under loomrun).
#
# 1. sleep: rank 1 sleeps outside any call while ranks 0 and 2 wait in
#    AllReduce #5. loom-info --status (given rank 0's pid, or rank 2's) must
#    show rank 1 not in a call, the others in loomAllReduce #5, and say that
#    rank 1 is the one missing. At LOOM_TIMEOUT (8 s) the rank that timed out
#    prints the same table once through the logger, and both failing ranks
#    write their recorder to LOOM_DUMP_DIR, which --status DIR reads back.
# 2. mismatch: rank 2 calls Broadcast #5 where the others call AllReduce #5;
#    --status must say which ranks called what at #5.
# 3. kill: rank 1 is SIGKILLed in a loop of AllReduces; the survivors' files
#    (valid JSON) are read back, naming rank 1 as exited.
set -u
. "$(dirname "$0")/../integration/common.sh"
require_tools loomrun loom-info
STUCK=$top_builddir/tests/faults/stuck
[ -x "$STUCK" ] || skip "$STUCK is not built (make check builds it)"

# pidof_rank DIR R: the pid rank R wrote, waiting up to 60 s for it
pidof_rank() {
    _i=0
    while [ ! -s "$1/rank.$2" ] && [ $_i -lt 600 ]; do
        sleep 0.1
        _i=$((_i + 1))
    done
    cat "$1/rank.$2" 2>/dev/null
}

# status_until OUT TARGET PATTERN: loom-info --status TARGET into OUT until OUT matches PATTERN
# (grep -E), for up to 60 s; 0 once it does
status_until() {
    _i=0
    while [ $_i -lt 200 ]; do
        "$LOOM_INFO" --status "$2" >"$1" 2>&1
        grep -Eq "$3" "$1" && return 0
        sleep 0.3
        _i=$((_i + 1))
    done
    return 1
}

# start_job CASE TIMEOUT MODE: 3 ranks of stuck MODE under loomrun --keep-going (so that failing
# ranks write their files before loomrun would stop the others), LOOM_DUMP_DIR=$dir/dump, in the
# background ($job); sets dir, pid0, pid1, pid2
start_job() {
    dir=$TEST_TMPDIR/$1
    mkdir -p "$dir/pids"
    LOOM_TIMEOUT=$2 LOOM_DUMP_DIR=$dir/dump timeout 120 "$LOOMRUN" -n 3 --keep-going "$STUCK" "$3" \
        "$dir/pids" >"$dir/job.log" 2>&1 &
    job=$!
    pid0=$(pidof_rank "$dir/pids" 0)
    pid1=$(pidof_rank "$dir/pids" 1)
    pid2=$(pidof_rank "$dir/pids" 2)
    if [ -z "$pid0" ] || [ -z "$pid1" ] || [ -z "$pid2" ]; then
        show_log "$dir/job.log"
        fail "$1: the ranks did not start"
    fi
}

# ---- 1. one rank sleeps outside any call
start_job sleep 8 sleep
if status_until "$dir/status0" "$pid0" '^wrong: .*rank 1 is waited for'; then
    note "sleep: loom-info --status $pid0:"
    sed 's/^/    /' "$dir/status0"
    expect_lines "$dir/status0" sleep \
        '^1 .* loomAllReduce +not in a call \([0-9.]+ s since its last call ended\)' \
        '^0 .* #5 +loomAllReduce +in loomAllReduce #5 since [0-9.]+ s' \
        '^2 .* #5 +loomAllReduce +in loomAllReduce #5 since [0-9.]+ s' \
        'waiting for rank [0-9] at step [0-9]+' \
        "^wrong: rank 1 is waited for and not in a call: ranks 0, 2 wait in loomAllReduce #5; rank 1's last call was loomAllReduce #4"
    # the recorder's entries: the sixth running, the fifth done, with what the plan chose
    "$LOOM_INFO" --status "$pid0" --ops 2 >"$dir/ops0" 2>&1
    expect_lines "$dir/ops0" "sleep (--ops)" \
        '^rank 0 +#5 +loomAllReduce +count 1024 +float32 +root - +[a-z]+/(Simple|LL) +running for' \
        '^rank 1 +#4 +loomAllReduce +count 1024 +float32 +root - +[a-z]+/(Simple|LL) +done in'
    # the same job seen from another rank
    "$LOOM_INFO" --status "$pid2" >"$dir/status2" 2>&1
    expect_lines "$dir/status2" "sleep (from rank 2)" '^wrong: rank 1 is waited for'
else
    show_log "$dir/status0"
    record_failure "sleep: loom-info --status $pid0 never named rank 1 as missing"
fi
# ranks 0 and 2 fail at LOOM_TIMEOUT and exit; then rank 1 is stopped
i=0
while kill -0 "$pid0" 2>/dev/null || kill -0 "$pid2" 2>/dev/null; do
    [ $i -lt 600 ] || break
    sleep 0.1
    i=$((i + 1))
done
kill -KILL "$pid1" 2>/dev/null
wait $job
status=$?
note "sleep: loomrun exited $status after LOOM_TIMEOUT (rank 1 SIGKILLed then)"
tables=$(grep -c '\[LOOM\] WARN communicator [0-9a-f]*: 3 ranks' "$dir/job.log")
if [ "$tables" -lt 1 ]; then
    show_log "$dir/job.log"
    record_failure "sleep: no rank printed the status table when it timed out"
else
    note "sleep: the table the timed-out rank printed:"
    grep '\[LOOM\] WARN' "$dir/job.log" | sed 's/^/    /'
    expect_lines "$dir/job.log" "sleep (timeout table)" \
        '\[LOOM\] WARN 1 +.* not in a call' '\[LOOM\] WARN wrong: rank 1 is waited for'
    # once a rank: no pid prints two tables
    dup=$(grep '\[LOOM\] WARN communicator' "$dir/job.log" | cut -d' ' -f1 | sort | uniq -d)
    [ -z "$dup" ] || record_failure "sleep: $dup printed the table more than once"
fi
"$LOOM_INFO" --status "$dir/dump" >"$dir/dump.out" 2>&1
note "sleep: loom-info --status DUMPDIR:"
sed 's/^/    /' "$dir/dump.out"
expect_lines "$dir/dump.out" "sleep (dump)" \
    '^0 .* failed in loomAllReduce #5 \((loomTimeout|loomRemoteError)\)' \
    '^2 .* failed in loomAllReduce #5 \((loomTimeout|loomRemoteError)\)' \
    '^1 .* (exited|running).*no file'

# ---- 2. different collectives at one sequence number
start_job mismatch 30 mismatch
pattern='^wrong: ranks 0, 1 called loomAllReduce #5 but rank 2 called loomBroadcast #5'
if status_until "$dir/status" "$pid1" "$pattern"; then
    note "mismatch: loom-info --status $pid1:"
    sed 's/^/    /' "$dir/status"
else
    show_log "$dir/status"
    record_failure "mismatch: loom-info --status never said rank 2 called another collective at #5"
fi
kill -KILL "$pid0" "$pid1" "$pid2" 2>/dev/null
wait $job

# ---- 3. a rank SIGKILLed: the survivors' files
start_job kill 30 loop
# rank 1 at #7 or later: every rank has ended #5, the first large AllReduce, so each
# survivor's file holds one done (under load the warm-up's #4 alone was seen, and the kill
# came in #5)
if status_until "$dir/live" "$pid0" '^1 .* #([7-9]|[1-9][0-9]+) +loomAllReduce'; then
    kill -KILL "$pid1"
fi
wait $job
note "kill: loomrun exited $? (rank 1 SIGKILLed)"
n=$(ls "$dir/dump" 2>/dev/null | grep -c '^loom-rec-.*-r[02]\.json$')
[ "$n" -eq 2 ] || record_failure "kill: $n files of ranks 0 and 2 in LOOM_DUMP_DIR, not 2"
if command -v python3 >/dev/null 2>&1; then
    for f in "$dir"/dump/*.json; do
        python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ops"]' "$f" ||
            record_failure "kill: $f is not JSON with ops"
    done
fi
"$LOOM_INFO" --status "$dir/dump" >"$dir/dump.out" 2>&1
note "kill: loom-info --status DUMPDIR:"
sed 's/^/    /' "$dir/dump.out"
expect_lines "$dir/dump.out" kill '^0 .* failed in loomAllReduce #[0-9]+ \(loomRemoteError\)' \
    '^2 .* failed in loomAllReduce #[0-9]+ \(loomRemoteError\)' '^1 .* exited' \
    '^wrong: .*rank 1 exited while ranks 0, 2 failed in loomAllReduce'
"$LOOM_INFO" --status "$dir/dump" --ops 3 >"$dir/ops.out" 2>&1
expect_lines "$dir/ops.out" "kill (--ops)" \
    '^rank 2 +#[0-9]+ +loomAllReduce +count 1048576 +float32 +root - +[a-z]+/(Simple|LL) +done in' \
    '^rank 2 +#[0-9]+ +loomAllReduce +count 1048576 .* failed \(loomRemoteError\) after'

# bad targets: one line, exit 1 or 2, no crash
"$LOOM_INFO" --status 999999999 >"$TEST_TMPDIR/bad" 2>&1
[ $? -eq 1 ] && grep -q "no Loom communicator\|cannot read" "$TEST_TMPDIR/bad" ||
    record_failure "bad pid: $(cat "$TEST_TMPDIR/bad")"
"$LOOM_INFO" --status $$ >"$TEST_TMPDIR/bad" 2>&1
[ $? -eq 1 ] && grep -q "has no Loom communicator" "$TEST_TMPDIR/bad" ||
    record_failure "a pid with no communicator: $(cat "$TEST_TMPDIR/bad")"
finish
