#!/bin/sh
# loomrun.sh — loomrun's behaviour as a launcher, with shell commands as ranks.
#
# Every case is bounded by loomrun's own --timeout, so a launcher that failed
# to stop a job shows up as exit status 124 instead of a hung suite. The
# ranks here never create a communicator; loomrun's rendezvous thread simply
# waits unused, which is itself part of what is tested (loomrun must exit
# anyway).
set -u
. "$(dirname "$0")/common.sh"

require_tools loomrun

out=$TEST_TMPDIR/out
err=$TEST_TMPDIR/err

# expect_status WANT DESCRIPTION -- CMD...: runs CMD, stdout to $out, stderr to $err.
expect_status() {
    _want=$1
    _what=$2
    shift 3
    run_to "$out" "$err" "$@"
    _got=$?
    if [ "$_got" -ne "$_want" ]; then
        record_failure "$_what: exit status $_got, expected $_want"
        echo "    stdout:"; show_log "$out"
        echo "    stderr:"; show_log "$err"
        return 1
    fi
    return 0
}

# expect_grep FILE PATTERN DESCRIPTION
expect_grep() {
    if ! grep -q -e "$2" "$1"; then
        record_failure "$3: no line matching '$2' in"
        show_log "$1"
    fi
}

note "all ranks exit 0"
expect_status 0 "three ranks running true" -- "$LOOMRUN" -n 3 --timeout 30 true

note "LOOM_* variables"
if expect_status 0 "ranks printing their variables" -- "$LOOMRUN" -n 4 --timeout 30 sh -c \
    'echo "$LOOM_RANK $LOOM_NRANKS $LOOM_LOCAL_RANK $LOOM_LOCAL_SIZE $LOOM_UNIQUE_ID"'; then
    printf '0 4 0 4\n1 4 1 4\n2 4 2 4\n3 4 3 4\n' >"$TEST_TMPDIR/want"
    cut -d' ' -f1-4 "$out" | sort >"$TEST_TMPDIR/got"
    cmp -s "$TEST_TMPDIR/want" "$TEST_TMPDIR/got" ||
        record_failure "rank variables are not 0..3 of 4: $(tr '\n' ';' <"$TEST_TMPDIR/got")"
    ids=$(cut -d' ' -f5 "$out" | sort -u)
    [ "$(echo "$ids" | wc -l)" -eq 1 ] || record_failure "ranks got different LOOM_UNIQUE_IDs"
    echo "$ids" | grep -Eq '^[0-9a-f]{256}$' ||
        record_failure "LOOM_UNIQUE_ID is not 256 lowercase hex characters: $ids"
fi
# Variables of an enclosing job must not leak through.
if expect_status 0 "inherited LOOM_RANK" -- env LOOM_RANK=9 LOOM_NRANKS=17 "$LOOMRUN" -n 1 \
    --timeout 30 sh -c 'echo "$LOOM_RANK $LOOM_NRANKS"'; then
    [ "$(cat "$out")" = "0 1" ] || record_failure "inherited LOOM_RANK/LOOM_NRANKS leaked: $(cat "$out")"
fi

note "a rank exiting 3 ends the job"
# Without termination the job would run into --timeout and exit 124 instead.
if expect_status 3 "rank 1 exits 3" -- "$LOOMRUN" -n 3 --timeout 60 sh -c \
    'if [ "$LOOM_RANK" = 1 ]; then exit 3; fi; exec sleep 50'; then
    expect_grep "$err" 'rank 1 (pid [0-9]*) exited with status 3; terminating the other 2 ranks' \
        "failure message"
fi

note "a rank killed by SIGKILL ends the job"
if expect_status 137 "rank 2 killed" -- "$LOOMRUN" -n 4 --timeout 60 sh -c \
    'if [ "$LOOM_RANK" = 2 ]; then kill -KILL $$; fi; exec sleep 50'; then
    expect_grep "$err" 'rank 2 (pid [0-9]*) killed by signal 9 (Killed); terminating the other 3 ranks' \
        "failure message"
fi

note "ranks that ignore SIGTERM get SIGKILL"
if expect_status 5 "rank 0 exits 5, others ignore SIGTERM" -- "$LOOMRUN" -n 3 --timeout 60 sh -c \
    'trap "" TERM; if [ "$LOOM_RANK" = 0 ]; then sleep 1; exit 5; fi; exec sleep 50'; then
    expect_grep "$err" 'sending SIGKILL' "escalation message"
fi

note "SIGTERM to loomrun reaches every rank"
"$LOOMRUN" -n 3 --timeout 60 sh -c \
    'sleep 50 & p=$!; trap "echo \$LOOM_RANK >>$0; kill \$p; exit 7" TERM; echo ready; wait' \
    "$TEST_TMPDIR/got-term" >"$out" 2>"$err" &
pid=$!
tries=0
while [ "$(grep -c ready "$out" 2>/dev/null)" != 3 ] && [ $tries -lt 200 ]; do
    sleep 0.1
    tries=$((tries + 1))
done
if [ $tries -ge 200 ]; then
    record_failure "the ranks never all printed ready"
fi
kill -TERM $pid
wait $pid
status=$?
if [ $status -ne 7 ]; then
    record_failure "loomrun after SIGTERM: exit status $status, expected 7 (the ranks' trap)"
    show_log "$err"
elif [ "$(sort "$TEST_TMPDIR/got-term" | tr '\n' ' ')" != "0 1 2 " ]; then
    record_failure "SIGTERM reached ranks '$(tr '\n' ' ' <"$TEST_TMPDIR/got-term")', expected 0 1 2"
fi

note "--tag-output"
if expect_status 0 "tagged output" -- "$LOOMRUN" -n 3 --tag-output --timeout 30 sh -c \
    'echo "out $LOOM_RANK"; echo "err $LOOM_RANK" >&2; printf "tail $LOOM_RANK"'; then
    printf '[0] out 0\n[0] tail 0\n[1] out 1\n[1] tail 1\n[2] out 2\n[2] tail 2\n' \
        >"$TEST_TMPDIR/want"
    sort "$out" | cmp -s - "$TEST_TMPDIR/want" ||
        record_failure "tagged stdout is '$(tr '\n' ';' <"$out")'"
    printf '[0] err 0\n[1] err 1\n[2] err 2\n' >"$TEST_TMPDIR/want"
    sort "$err" | cmp -s - "$TEST_TMPDIR/want" ||
        record_failure "tagged stderr is '$(tr '\n' ';' <"$err")'"
fi

note "--timeout"
if expect_status 124 "job longer than --timeout" -- "$LOOMRUN" -n 2 --timeout 1 sleep 50; then
    expect_grep "$err" 'timeout' "timeout message"
fi

note "usage errors exit 2"
expect_status 2 "no arguments" -- "$LOOMRUN"
expect_status 2 "no -n" -- "$LOOMRUN" true
expect_status 2 "-n 0" -- "$LOOMRUN" -n 0 true
expect_status 2 "-n 4097" -- "$LOOMRUN" -n 4097 true
expect_status 2 "-n x" -- "$LOOMRUN" -n x true
expect_status 2 "no program" -- "$LOOMRUN" -n 2
expect_status 2 "unknown option" -- "$LOOMRUN" --bogus -n 2 true
expect_status 2 "bad --timeout" -- "$LOOMRUN" -n 2 --timeout soon true
expect_grep "$err" 'usage' "usage message"
if expect_status 127 "missing program" -- "$LOOMRUN" -n 2 ./no-such-program-here; then
    expect_grep "$err" 'no-such-program-here' "missing program message"
fi
expect_status 0 "--help" -- "$LOOMRUN" --help
expect_grep "$out" 'usage: loomrun' "help text"

finish
