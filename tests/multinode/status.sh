#!/bin/sh
# status.sh — loom-info --status HOST:PORT: the status of a job across two
# namespace hosts (netns.sh), asked from the other host.
#
# Four ranks of tests/faults/stuck (sleep mode), ranks 0 and 1 on h1, 2 and
# 3 on h2, joined through LOOM_ROOT_ADDR on h1: rank 1 sleeps outside any
# call while the others wait in AllReduce #5 (LOOM_TIMEOUT is 60 s, longer
# than the test needs). Then:
#   pid       loom-info --status PID of rank 0, on h1, prints the job's secret
#             (LOOM_STATUS_SECRET=...) and every rank's status listener
#   net       loom-info --status ADDR-of-rank-0 run on h2 with that secret:
#             a row for each of the 4 ranks, with their hosts, rank 1 not in a
#             call, the others in loomAllReduce #5, and the line naming rank 1
#             as the one missing; the same asked of rank 3, on h2 itself
#   stopped   rank 3 stopped (SIGSTOP): its row says it did not answer, the
#             others are read, within the 5 s a rank is given
#   wrong     a wrong secret: refused, one line, exit 1; no secret: one line
#             saying how to get it; the ranks log no warning and keep running
#             (a right query afterwards still answers)
#   tls       the same with LOOM_NET_TLS=1 on every rank and on loom-info; a
#             wrong secret is refused with a line naming the TLS handshake,
#             and loom-info without LOOM_NET_TLS with a line naming it
#             (only where the build has TLS)
# Skipped, in one line, unless root with network namespaces.
set -u
. "$(dirname "$0")/../integration/common.sh"
. "$(dirname "$0")/netns.sh"

require_tools loom-info
STUCK=$top_builddir/tests/faults/stuck
[ -x "$STUCK" ] || skip "$STUCK is not built (run make check)"
mn_require
trap 'mn_cleanup; [ -n "${KEEP_TMP:-}" ] || rm -rf "$TEST_TMPDIR"' EXIT
trap 'mn_cleanup; rm -rf "$TEST_TMPDIR"; exit 130' INT TERM
mn_hosts 2
port=$((21000 + ($$ + 7919) % 20000))

# start_job NAME "ENV": the 4 ranks with ENV (VAR=value words) in the background; sets dir and
# pids (rank 0 first), waiting until each rank wrote its pid
start_job() {
    dir=$TEST_TMPDIR/$1
    mkdir -p "$dir/pids"
    port=$((port + 1))
    pids=""
    for r in 0 1 2 3; do
        # shellcheck disable=SC2086 # $2 is a list of VAR=value words
        timeout 120 "$MN_EXEC" "h$((r / 2 + 1))" env OMPI_COMM_WORLD_RANK=$r \
            OMPI_COMM_WORLD_SIZE=4 LOOM_ROOT_ADDR="$(mn_addr h1):$port" LOOM_SOCKET_IFNAME=eth0 \
            LOOM_TIMEOUT=60 $2 "$STUCK" sleep "$dir/pids" >"$dir/rank.$r.log" 2>&1 &
        pids="$pids $!"
    done
    for r in 0 1 2 3; do
        i=0
        while [ ! -s "$dir/pids/rank.$r" ] && [ $i -lt 600 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        [ -s "$dir/pids/rank.$r" ] || {
            cat "$dir"/rank.*.log >&2
            fail "$1: rank $r did not start"
        }
    done
    pid0=$(cat "$dir/pids/rank.0")
}

stop_job() {
    for p in $pids; do
        kill -KILL "$p" 2>/dev/null
    done
    for p in $pids; do
        wait "$p" 2>/dev/null
    done
}

# info HOST OUT ARGS...: loom-info ARGS run on HOST into OUT; its exit status in $rc
info() {
    _host=$1
    _out=$2
    shift 2
    timeout 60 "$MN_EXEC" "$_host" env "$@" >"$_out" 2>&1
    rc=$?
}

# net_until OUT "ENV" ADDR: loom-info --status ADDR on h2 until rank 1 is named missing (60 s)
net_until() {
    _i=0
    while [ $_i -lt 100 ]; do
        # shellcheck disable=SC2086 # $2 is a list of VAR=value words
        info h2 "$1" $2 "$LOOM_INFO" --status "$3"
        grep -q '^wrong: rank 1 is waited for' "$1" && return 0
        sleep 0.5
        _i=$((_i + 1))
    done
    return 1
}

# check_job NAME "ENV": cases pid, net and wrong on a job started with ENV (on loom-info too)
check_job() {
    name=$1
    envs=$2
    start_job "$name" "$envs"
    # shellcheck disable=SC2086
    info h1 "$dir/pid.out" $envs "$LOOM_INFO" --status "$pid0"
    note "$name: loom-info --status $pid0 on h1:"
    sed 's/^/    /' "$dir/pid.out"
    secret=$(sed -n 's/.*LOOM_STATUS_SECRET=\([0-9a-f]*\) .*/\1/p' "$dir/pid.out")
    addr0=$(grep -o 'rank 0 [0-9.]*:[0-9]*' "$dir/pid.out" | cut -d' ' -f3)
    addr3=$(grep -o 'rank 3 [0-9.]*:[0-9]*' "$dir/pid.out" | cut -d' ' -f3)
    if [ ${#secret} -ne 64 ] || [ -z "$addr0" ] || [ -z "$addr3" ]; then
        record_failure "$name: loom-info --status PID printed no secret or no listener of ranks 0 and 3"
        stop_job
        return
    fi
    case $addr0 in "$(mn_addr h1)":*) ;; *) record_failure "$name: rank 0 listens at $addr0, not on h1" ;; esac
    case $addr3 in "$(mn_addr h2)":*) ;; *) record_failure "$name: rank 3 listens at $addr3, not on h2" ;; esac

    if net_until "$dir/net.out" "$envs LOOM_STATUS_SECRET=$secret" "$addr0"; then
        note "$name: on h2, LOOM_STATUS_SECRET=... loom-info --status $addr0:"
        sed 's/^/    /' "$dir/net.out"
        expect_lines "$dir/net.out" "$name (net)" \
            '^0 +h1 .* #5 +loomAllReduce +in loomAllReduce #5 since [0-9.]+ s' \
            '^1 +h1 .* loomAllReduce +not in a call \([0-9.]+ s since its last call ended\)' \
            '^2 +h2 .* #5 +loomAllReduce +in loomAllReduce #5 since [0-9.]+ s' \
            '^3 +h2 .* #5 +loomAllReduce +in loomAllReduce #5 since [0-9.]+ s' \
            'waiting for rank [0-9] at step [0-9]+' \
            "^wrong: rank 1 is waited for and not in a call: ranks 0, 2, 3 wait in loomAllReduce #5; rank 1's last call was loomAllReduce #4"
    else
        record_failure "$name: loom-info --status $addr0 on h2 never named rank 1 as missing"
    fi
    # shellcheck disable=SC2086
    info h2 "$dir/net3.out" $envs LOOM_STATUS_SECRET="$secret" "$LOOM_INFO" --status "$addr3" --ops 1
    expect_lines "$dir/net3.out" "$name (asking rank 3)" '^wrong: rank 1 is waited for' \
        '^rank 1 +#4 +loomAllReduce +count 1024 .* done in'

    if [ -z "$envs" ]; then
        # a rank that cannot answer (stopped): a row saying so, within the 5 s bound
        pid3=$(cat "$dir/pids/rank.3")
        kill -STOP "$pid3"
        start=$(date +%s)
        info h2 "$dir/stopped.out" LOOM_STATUS_SECRET="$secret" "$LOOM_INFO" --status "$addr0"
        took=$(($(date +%s) - start))
        kill -CONT "$pid3"
        note "$name: rank 3 stopped (SIGSTOP): exit $rc after $took s:"
        sed 's/^/    /' "$dir/stopped.out"
        [ "$rc" -eq 0 ] || record_failure "$name: loom-info failed with rank 3 stopped"
        [ "$took" -lt 30 ] || record_failure "$name: loom-info took $took s with rank 3 stopped"
        expect_lines "$dir/stopped.out" "$name (rank 3 stopped)" \
            '^3 +h2 .* no answer: the rank at [0-9.]+:[0-9]+ did not answer in time' \
            '^2 +h2 .* in loomAllReduce #5'
    fi
    wrong=$(echo "$secret" | tr '0-9a-f' '1-9a-f0')
    # shellcheck disable=SC2086
    info h2 "$dir/wrong.out" $envs LOOM_STATUS_SECRET="$wrong" "$LOOM_INFO" --status "$addr0"
    note "$name: a wrong secret (exit $rc): $(cat "$dir/wrong.out")"
    [ "$rc" -eq 1 ] && [ "$(wc -l <"$dir/wrong.out")" -eq 1 ] &&
        grep -q "^loom-info: --status $addr0: the rank at $addr0 refused the query" "$dir/wrong.out" ||
        record_failure "$name: a wrong secret was not refused in one line with exit 1"
    # shellcheck disable=SC2086
    info h2 "$dir/none.out" $envs LOOM_STATUS_SECRET= LOOM_UNIQUE_ID= "$LOOM_INFO" --status "$addr0"
    [ "$rc" -eq 1 ] && grep -q "needs the job's secret: set LOOM_STATUS_SECRET" "$dir/none.out" ||
        record_failure "$name: no secret: $(cat "$dir/none.out")"
    if [ -n "$envs" ]; then
        info h2 "$dir/notls.out" LOOM_STATUS_SECRET="$secret" "$LOOM_INFO" --status "$addr0"
        note "$name: loom-info without LOOM_NET_TLS (exit $rc): $(cat "$dir/notls.out")"
        [ "$rc" -eq 1 ] && grep -q "LOOM_NET_TLS differs from the job's (it is 0 here)" "$dir/notls.out" ||
            record_failure "$name: loom-info without LOOM_NET_TLS was not told about it"
        grep -q "TLS handshake with .* failed" "$dir/wrong.out" ||
            record_failure "$name: the wrong secret's refusal does not name the TLS handshake"
    fi
    # the ranks go on: still running, no warning, and they still answer
    for p in $pids; do
        kill -0 "$p" 2>/dev/null || record_failure "$name: a rank ended after the refused queries"
    done
    if grep -h "\[LOOM\] WARN" "$dir"/rank.*.log >"$dir/warn" 2>/dev/null; then
        show_log "$dir/warn"
        record_failure "$name: a rank logged a warning"
    fi
    # shellcheck disable=SC2086
    info h2 "$dir/again.out" $envs LOOM_STATUS_SECRET="$secret" "$LOOM_INFO" --status "$addr0"
    expect_lines "$dir/again.out" "$name (after the refusals)" '^wrong: rank 1 is waited for'
    stop_job
}

check_job plain ""
if "$LOOM_INFO" | grep -q "tls=yes"; then
    check_job tls "LOOM_NET_TLS=1"
else
    note "tls: skipped, this build has no TLS (configure found no OpenSSL 3)"
fi
finish
