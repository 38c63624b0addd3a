#!/bin/sh
# compress.sh — a "loom" process group made with
# torch_loom.Options(net_compress="bf16") sends its float32 all_reduce as
# bfloat16 over TCP (tests/torch/compress.py says what is checked), on 3 processes.
set -u
. "$(dirname "$0")/common.sh"
log=$TEST_TMPDIR/compress.log
if run_logged "$log" "$TORCH_PYTHON" "$TORCH_TESTS_DIR/compress.py" 3 "$TEST_TMPDIR"; then
    grep "^compress:" "$log"
    [ "$(grep -o 'compress: rank [0-9]*: [0-9]* checks passed' "$log" | wc -l)" -eq 3 ] ||
        record_failure "not every rank said it passed"
else
    show_log "$log"
    record_failure "compress.py failed"
fi
finish
