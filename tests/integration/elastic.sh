#!/bin/sh
# elastic.sh — loom-train --elastic goes on training after a rank dies.
#
# 1. DDP on 4 ranks, fp32, --check, 20 steps; rank 2 SIGKILLs itself in step
#    5 (--test-kill 2:5) and loomrun --keep-going lets the others run on.
#    They shrink to 3 ranks, go back to the state saved before step 5, redo
#    it on the same global batch of 128 tokens (43, 43, 42 each) and train
#    to step 20. --check compares every step's loss and gradient norm and the
#    final weights with the single-process reference (which at step 5 holds
#    the weights the survivors went back to), and the losses from step 5 on
#    once more. loomrun exits 137 (rank 2's SIGKILL) and no other rank fails;
#    the elastic line (with the pause) and "check: PASSED" must be there.
# 2. The same with bf16 and an even split (batch 30: 120 tokens, 40 each).
# 3. zero2 and moe with the same kill stop with a line saying what was lost.
# 4. Growing back (--grow-file): DDP as in 1; after the shrink rank 0 writes
#    a grow id to a file, a replacement started by this script (loom-train
#    --join FILE, same options, outside loomrun) joins through loomCommGrow
#    as rank 3, gets the state of step 5 from rank 0, and the 4 redo step 5
#    and train to 20. --check as in 1 (DDP's global batch is the same at
#    every width, so the reference is the same); the replacement must exit
#    0 with the others, and the losses from step 5 on be compared on 4 ranks.
set -u
. "$(dirname "$0")/common.sh"
require_tools loomrun
LOOM_TRAIN=${LOOM_TRAIN:-$top_builddir/train/loom-train}
[ -x "$LOOM_TRAIN" ] || skip "$LOOM_TRAIN is not built (run make first)"

# elastic NAME ARGS...: 4 ranks, rank 2 killed in step 5, the others must finish and pass
elastic() {
    _name=$1
    shift
    _log=$TEST_TMPDIR/$_name.log
    run_logged "$_log" "$LOOMRUN" -n 4 --keep-going "$LOOM_TRAIN" --elastic --check --steps 20 \
        --log-every 5 --test-kill 2:5 "$@"
    _status=$?
    _line=$(grep "^elastic: " "$_log")
    note "$_name: $_line"
    if [ "$_status" -ne 137 ] || [ "$(grep -c '^loomrun: rank' "$_log")" -ne 1 ] ||
        ! grep -q "^loomrun: rank 2 .* killed by signal 9" "$_log"; then
        show_log "$_log"
        record_failure "$_name: loomrun exited $_status; only rank 2 should have failed (137)"
        return
    fi
    echo "$_line" | grep -q "^elastic: rank 2 failed in step 5; 3 ranks redo it .* pause [0-9.]* s" ||
        record_failure "$_name: no elastic line naming rank 2, step 5, 3 ranks and the pause"
    grep -q "^check: after the failure, steps 5..20 on 3 ranks: .*  ok$" "$_log" ||
        record_failure "$_name: the losses after the failure were not compared, or differ"
    train_check "$_log" 0 "$_name" 20
}

elastic ddp --mode ddp
elastic ddp-bf16 --mode ddp --dtype bf16 --batch 30 --bucket-mb 0.1

note=$TEST_TMPDIR/grow.note
glog=$TEST_TMPDIR/grow.log
jlog=$TEST_TMPDIR/join.log
rm -f "$note"
echo "+ loomrun -n 4 loom-train --elastic --grow-file $note ... & loom-train --join $note ..."
_timed "$LOOMRUN" -n 4 --keep-going "$LOOM_TRAIN" --elastic --grow-file "$note" --check \
    --steps 20 --log-every 5 --test-kill 2:5 --mode ddp >"$glog" 2>&1 &
job=$!
_timed "$LOOM_TRAIN" --join "$note" --check --steps 20 --log-every 5 --mode ddp >"$jlog" 2>&1
jstatus=$?
wait "$job"
gstatus=$?
note "grow: $(grep '^elastic: grew' "$glog") / $(grep '^elastic: rank 3 joined' "$jlog")"
if [ "$gstatus" -ne 137 ] || [ "$jstatus" -ne 0 ]; then
    show_log "$glog"
    show_log "$jlog"
    record_failure "grow: loomrun exited $gstatus (137 expected), the replacement $jstatus (0)"
else
    grep -q "^elastic: grew back to 4 ranks (the replacement is rank 3); they redo step 5" \
        "$glog" || record_failure "grow: no line saying the job grew back to 4 ranks"
    grep -q "^check: after the failure, steps 5..20 on 4 ranks: .*  ok$" "$glog" ||
        record_failure "grow: the losses after growing back were not compared, or differ"
    train_check "$glog" 0 grow 20
fi

for mode in zero2 moe; do
    log=$TEST_TMPDIR/$mode.log
    run_logged "$log" "$LOOMRUN" -n 4 --keep-going "$LOOM_TRAIN" --mode "$mode" --elastic \
        --steps 10 --test-kill 2:5
    status=$?
    line=$(grep "^elastic: " "$log")
    note "$mode: $line"
    [ "$status" -ne 0 ] || record_failure "$mode: exited 0 after losing a shard"
    echo "$line" | grep -q "^elastic: rank 2 failed in step 5; in mode $mode .* is lost" || {
        show_log "$log"
        record_failure "$mode: no line saying what was lost"
    }
done
finish
