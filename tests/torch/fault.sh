#!/bin/sh
# fault.sh — a rank of a "loom" group dies: the two survivors get a
# RuntimeError from Loom naming it, not a hang, and go on without it after
# shrink_group (tests/torch/fault.py).
set -u
. "$(dirname "$0")/common.sh"
log=$TEST_TMPDIR/fault.log
run_logged "$log" "$TORCH_PYTHON" "$TORCH_TESTS_DIR/fault.py" || record_failure "fault.py failed"
grep "^fault:" "$log"
[ "$(grep -c '^fault: rank [01]: shrank' "$log")" -eq 2 ] && [ "$(grep -c '^fault: rank [01]: destroyed' "$log")" -eq 2 ] || { show_log "$log"; record_failure "a survivor did not finish"; }
finish
