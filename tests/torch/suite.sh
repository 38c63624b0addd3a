#!/bin/sh
# suite.sh — PyTorch's own distributed tests (torch/testing/_internal/
# distributed/distributed_test.py, DistributedTest, 2 processes) against
# loom and against gloo: no test may fail or error with loom that passes
# with gloo (compare.py). make check runs the subset below, the tests of
# every c10d operation torch_loom implements plus DDP and subgroups;
# SUITE_ALL=1 runs the whole file (docs/torch.md has its counts). Then,
# with SUITE_GATES=gloo, the tests that the suite runs only for gloo by
# name, of operations loom has (suite.py's GLOO_GATED), for loom.
# The processes of each test are forked from the runner (suite.py says why).
set -u
. "$(dirname "$0")/common.sh"
SUBSET="test_all_reduce_sum test_all_reduce_max test_all_reduce_coalesced test_all_reduce_complex
test_broadcast test_reduce_sum test_reduce_max test_all_gather test_gather test_scatter
test_reduce_scatter test_all_to_all test_barrier test_monitored_barrier test_send_recv test_isend
test_irecv test_batch_isend_irecv test_get_backend test_get_future test_destroy
test_DistributedDataParallelCPU test_accumulate_gradients_no_sync test_ddp_logging_data_cpu
test_grads_same_across_ranks_with_no_sync subgroup test_new_group"
[ "${SUITE_ALL:-0}" = 1 ] && SUBSET=
suite() { # NAME BACKEND GATES PATTERNS...: suite.py BACKEND into NAME.txt and NAME.log
    _name=$1 _b=$2 _gates=$3
    shift 3
    run_logged "$TEST_TMPDIR/$_name.log" env SUITE_START=fork SUITE_GATES="$_gates" \
        "$TORCH_PYTHON" "$TORCH_TESTS_DIR/suite.py" "$_b" "$TEST_TMPDIR/$_name.txt" "$@" ||
        { show_log "$TEST_TMPDIR/$_name.log"; record_failure "suite.py $_b $* exited nonzero"; }
    grep '^suite:' "$TEST_TMPDIR/$_name.log"
}
# shellcheck disable=SC2086 # the subset is a list of patterns
suite gloo gloo "" $SUBSET
# shellcheck disable=SC2086
suite loom loom "" $SUBSET
# the tests the suite keeps to gloo by name, of what loom has (suite.py's
# GLOO_GATED, all in the subset), for loom: their results replace the skips
# of the pass before
suite gated loom gloo GLOO_GATED
cat "$TEST_TMPDIR/gated.txt" >>"$TEST_TMPDIR/loom.txt"
"$TORCH_PYTHON" "$TORCH_TESTS_DIR/compare.py" "$TEST_TMPDIR/loom.txt" "$TEST_TMPDIR/gloo.txt" \
    "$(grep '^suite: gloo' "$TEST_TMPDIR/gloo.log" | awk '{print $3}')" ||
    record_failure "a test passed with gloo and not with loom"
finish
