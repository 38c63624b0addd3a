#!/bin/sh
# valgrind.sh — two ranks under valgrind's memcheck: no invalid access, no
# use of uninitialised memory, no definite leak.
#
# loom-perf runs every collective on 2 ranks, blocking (-z 1) and on a host
# stream (-z 0), each rank under memcheck (through libtool, so that the real
# binary and the uninstalled library are what valgrind sees).
# --error-exitcode makes any error fail the rank, hence loomrun; the log is
# also searched for a non-zero ERROR SUMMARY. Skipped without valgrind, and
# in sanitizer builds (valgrind cannot run sanitized binaries).
set -u
. "$(dirname "$0")/common.sh"
require_tools loomrun loom-perf

command -v valgrind >/dev/null 2>&1 || skip "valgrind is not installed (apt-get install valgrind)"
case "${LOOM_BUILD_SANITIZERS:-no}" in
no | "") ;;
*) skip "built with -fsanitize=$LOOM_BUILD_SANITIZERS; valgrind cannot run it" ;;
esac

MEMCHECK="valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
--show-leak-kinds=definite --track-fds=no"
for mode in 1 0; do
    log=$TEST_TMPDIR/z$mode.log
    # shellcheck disable=SC2086 # MEMCHECK is a word list
    run_logged "$log" "$LOOMRUN" -n 2 --timeout 240 "$top_builddir/libtool" --mode=execute \
        $MEMCHECK "$LOOM_PERF" -C all -b 8 -e 256K -f 16 -n 2 -w 1 -c 1 -z $mode
    status=$?
    if [ $status -ne 0 ]; then
        show_log "$log"
        record_failure "-z $mode: exit status $status under memcheck"
    elif grep -q "ERROR SUMMARY: [1-9]" "$log"; then
        show_log "$log"
        record_failure "-z $mode: memcheck reported errors"
    elif ! grep -q "ERROR SUMMARY: 0 errors" "$log"; then
        show_log "$log"
        record_failure "-z $mode: no memcheck summary (did valgrind run?)"
    else
        note "-z $mode: $(grep -c 'ERROR SUMMARY: 0 errors' "$log") rank(s), 0 errors"
    fi
done
finish
