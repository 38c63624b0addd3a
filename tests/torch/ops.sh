#!/bin/sh
# ops.sh — every operation and dtype of the "loom" torch.distributed backend
# on groups of 1, 2, 3 and 4 processes, against exact results and against
# gloo (tests/torch/ops.py says what is checked), with every init method.
set -u
. "$(dirname "$0")/common.sh"
log=$TEST_TMPDIR/ops.log
if run_logged "$log" "$TORCH_PYTHON" "$TORCH_TESTS_DIR/ops.py" 4 "$TEST_TMPDIR"; then
    grep "^ops:" "$log"
    # grep -o: counts each rank's line even where two were interleaved
    [ "$(grep -o 'ops: rank [0-9]*: [0-9]* checks passed' "$log" | wc -l)" -eq 4 ] ||
        record_failure "not every rank said it passed"
else
    show_log "$log"
    record_failure "ops.py failed"
fi
finish
