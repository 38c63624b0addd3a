# common.sh — helpers sourced by the integration test scripts.
#
# The scripts launch real processes, so what they share is where the tools
# are, how a command is run without ever hanging the suite, and one way of
# saying pass, fail or skip (exit 0, 1 or 77, as automake's test driver reads
# them), each in one line.
#
# Variables (set before sourcing to override):
#   top_builddir, top_srcdir  set by `make check`; default: the repository root
#   LOOMRUN, LOOM_PERF, LOOM_INFO   the tools in $top_builddir/tools
#   LOOM_TEST_TIMEOUT         seconds one command may run (default 300)
#   TEST_NAME                 the script's name, for messages
#   TEST_TMPDIR               a scratch directory, removed on exit
# Functions:
#   note MSG...               print one line
#   skip WHY...               "SKIP: name: WHY", exit 77
#   fail WHY...               "FAIL: name: WHY", exit 1
#   record_failure WHY...     "FAIL: name: WHY", remember it, carry on
#   finish                    exit 1 if a failure was recorded, else "PASS: name", exit 0
#   require_tools NAME...     skip unless each tools/NAME is built (and warm its libtool wrapper)
#   run CMD...                print "+ CMD", run it under the timeout; returns its status
#   run_logged LOG CMD...     as run, with stdout and stderr going to LOG
#   run_to OUT ERR CMD...     as run, with stdout to OUT and stderr to ERR
#   show_log LOG              print LOG indented (the tail if long), for a failure
#   expect_lines OUT CASE PATTERN...  every PATTERN (grep -E) is in OUT, else show OUT
#                             and record a failure naming CASE (returns 1)
#   perf_case N OPTIONS...    loomrun -n N loom-perf -c 1 -n 1 -w 0 OPTIONS as a
#                             correctness case: a failure unless it exits 0, prints
#                             rows, every #wrong is 0 (or N/A) and bounds are OK;
#                             PERF_ENV ("VAR=value ...") is its extra environment
#   perf_check LOG STATUS CASE  judge a loom-perf -c 1 run: record a failure naming CASE
#                             unless STATUS is 0, every #wrong reads 0 or N/A, there are
#                             result rows and the out-of-bounds footer says OK
#   train_check LOG STATUS NAME STEPS  judge a loom-train --check run: record a failure
#                             naming NAME unless STATUS is 0, the check PASSED and the
#                             parameters are bitwise identical across ranks (after step
#                             STEPS, or sharded) and at the end; prints the check lines
#   fakehost_init             write $FAKE, a wrapper "$FAKE PER_HOST PROG ARGS..." that
#                             gives each rank LOOM_HOSTID fake<LOOM_RANK / PER_HOST>, so
#                             that ranks of this machine look like PER_HOST a host
#   comm_check LOG STATUS CASE NRANKS PATTERN...  judge loom-info --comm run with
#                             LOOM_DEBUG=INFO: STATUS 0, every PATTERN (grep) in LOG, and
#                             one "NET/IB: not used" line per rank

TEST_NAME=$(basename "$0")
if [ -z "${top_builddir:-}" ]; then
    top_builddir=$(cd "$(dirname "$0")/../.." && pwd)
fi
top_srcdir=${top_srcdir:-$top_builddir}
LOOMRUN=${LOOMRUN:-$top_builddir/tools/loomrun}
LOOM_PERF=${LOOM_PERF:-$top_builddir/tools/loom-perf}
LOOM_INFO=${LOOM_INFO:-$top_builddir/tools/loom-info}
LOOM_TEST_TIMEOUT=${LOOM_TEST_TIMEOUT:-300}
export top_builddir top_srcdir

_test_failures=0

TEST_TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/loom-${TEST_NAME%.sh}.XXXXXX") || {
    echo "FAIL: $TEST_NAME: cannot create a scratch directory"
    exit 1
}
trap 'rm -rf "$TEST_TMPDIR"' EXIT
trap 'rm -rf "$TEST_TMPDIR"; exit 130' INT TERM

note() {
    echo "$TEST_NAME: $*"
}

skip() {
    echo "SKIP: $TEST_NAME: $*"
    exit 77
}

fail() {
    echo "FAIL: $TEST_NAME: $*"
    exit 1
}

record_failure() {
    echo "FAIL: $TEST_NAME: $*"
    _test_failures=$((_test_failures + 1))
}

finish() {
    if [ "$_test_failures" -ne 0 ]; then
        echo "FAIL: $TEST_NAME: $_test_failures check(s) failed"
        exit 1
    fi
    echo "PASS: $TEST_NAME"
    exit 0
}

# A libtool wrapper may relink its program the first time it runs; running
# each tool once here keeps N ranks from racing to do it.
require_tools() {
    for _tool in "$@"; do
        _path=$top_builddir/tools/$_tool
        [ -x "$_path" ] || skip "$_path is not built (run make first)"
        "$_path" -h >/dev/null 2>&1 || fail "$_path -h failed"
    done
}

# timeout(1) runs the command in a process group of its own and signals the
# whole group, so a hung job loses its grandchildren too.
_timed() {
    if command -v timeout >/dev/null 2>&1; then
        timeout -k 10 "$LOOM_TEST_TIMEOUT" "$@"
    else
        "$@"
    fi
}

_report_timeout() {
    if [ "$1" -eq 124 ]; then
        echo "$TEST_NAME: exit status 124, a timeout (the command's own or the $LOOM_TEST_TIMEOUT s limit)"
    fi
}

run() {
    echo "+ $*"
    _timed "$@"
    _status=$?
    _report_timeout "$_status" "$*"
    return "$_status"
}

run_logged() {
    _log=$1
    shift
    echo "+ $*"
    _timed "$@" >"$_log" 2>&1
    _status=$?
    _report_timeout "$_status" "$*"
    return "$_status"
}

run_to() {
    _out=$1
    _err=$2
    shift 2
    echo "+ $*"
    _timed "$@" >"$_out" 2>"$_err"
    _status=$?
    _report_timeout "$_status" "$*"
    return "$_status"
}

show_log() {
    if [ "$(wc -l <"$1")" -gt 60 ]; then
        echo "    ... (last 60 lines of $(wc -l <"$1"))"
        tail -n 60 "$1" | sed 's/^/    /'
    else
        sed 's/^/    /' "$1"
    fi
}

expect_lines() {
    _out=$1
    _case=$2
    shift 2
    for _p in "$@"; do
        if ! grep -Eq -- "$_p" "$_out"; then
            show_log "$_out"
            record_failure "$_case: no line matching '$_p'"
            return 1
        fi
    done
    return 0
}

perf_check() {
    _plog=$1
    _pstatus=$2
    _pcase=$3
    if [ "$_pstatus" -ne 0 ]; then
        record_failure "$_pcase: exit status $_pstatus"
        show_log "$_plog"
        return 1
    fi
    # Data rows have 13 fields; #wrong is the 9th (out of place) and 13th (in place).
    _bad=$(awk '!/^#/ && NF == 13 && (($9 != "0" && $9 != "N/A") || ($13 != "0" && $13 != "N/A"))' \
        "$_plog")
    _rows=$(awk '!/^#/ && NF == 13' "$_plog" | wc -l)
    if [ -n "$_bad" ]; then
        record_failure "$_pcase: rows with wrong values:"
        echo "$_bad" | head -n 20 | sed 's/^/    /'
    elif [ "$_rows" -eq 0 ]; then
        record_failure "$_pcase: no result rows"
        show_log "$_plog"
    elif ! grep -q '^# Out of bounds values : 0 OK' "$_plog"; then
        record_failure "$_pcase: no '# Out of bounds values : 0 OK' footer"
        show_log "$_plog"
    else
        note "ok: $_rows rows, 0 wrong"
        return 0
    fi
    return 1
}

train_check() {
    _tlog=$1
    _tstatus=$2
    _tname=$3
    if [ "$_tstatus" -ne 0 ]; then
        show_log "$_tlog"
        record_failure "$_tname: loom-train exited with status $_tstatus"
        return 1
    fi
    if ! grep -q "^check: PASSED" "$_tlog" ||
        ! grep -q -e "^verify: .* bitwise identical after step $4" \
            -e "^verify: every parameter is sharded" "$_tlog" ||
        ! grep -q "^check: final weights gathered on every rank are bitwise identical" "$_tlog"; then
        show_log "$_tlog"
        record_failure "$_tname: no PASSED verdict or parameters not identical across ranks"
        return 1
    fi
    grep "^check:   " "$_tlog" | sed "s/^/    $_tname: /"
}

comm_check() {
    _clog=$1
    _cstatus=$2
    _ccase=$3
    _cranks=$4
    shift 4
    if [ "$_cstatus" -ne 0 ]; then
        record_failure "loom-info --comm, $_ccase: exit status $_cstatus"
        show_log "$_clog"
        return 1
    fi
    _cfail=0
    for _want in "$@"; do
        grep -q "$_want" "$_clog" || { record_failure "$_ccase: no line matches '$_want'"; _cfail=1; }
    done
    _nib=$(grep -c "NET/IB: not used" "$_clog")
    if [ "$_nib" -ne "$_cranks" ]; then
        record_failure "$_ccase: $_nib 'NET/IB: not used' lines for $_cranks ranks"
        _cfail=1
    fi
    [ $_cfail -eq 0 ] || show_log "$_clog"
    return $_cfail
}

FAKE=$TEST_TMPDIR/fakehost
fakehost_init() {
    cat >"$FAKE" <<'EOS'
#!/bin/sh
per=$1
shift
LOOM_HOSTID=fake$((LOOM_RANK / per)) exec "$@"
EOS
    chmod +x "$FAKE"
}

_perf_cases=0
# Extra environment for the next cases ("VAR=value ..."), empty for none.
PERF_ENV=

# perf_case NRANKS LOOM-PERF-OPTIONS...
perf_case() {
    _n=$1
    shift
    _perf_cases=$((_perf_cases + 1))
    _log=$TEST_TMPDIR/case$_perf_cases.log
    # shellcheck disable=SC2086 # PERF_ENV is a word list
    run_logged "$_log" env $PERF_ENV "$LOOMRUN" -n "$_n" --timeout 240 "$LOOM_PERF" -c 1 -n 1 \
        -w 0 "$@"
    perf_check "$_log" $? "n=$_n${PERF_ENV:+ $PERF_ENV} $*"
}
