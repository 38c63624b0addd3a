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
