#!/bin/sh
# train.sh — the training drivers train correctly on 4 ranks, and the memory
# planner prints hand-computed figures.
#
# 1. loom-train --check --steps 20 on 4 ranks passes for every mode (ddp,
#    zero1, zero2, zero3, moe), for DDP without overlap and alternating the
#    two, for bf16 (ddp and every ZeRO stage) and for MoE with top-1 and top-2
#    routing: the run is compared with
#    a single-process reference, and its parameters are bitwise identical
#    across ranks.
# 2. The ZeRO-3 memory ledger (bf16) is within 5% of 16 Psi/N for model state,
#    and the ZeRO-1 and ZeRO-2 ledgers match their formulas too.
# 3. loom-memplan: the ZeRO paper's 7.5B-parameter model on 64 ranks
#    (120, 31.406, 16.641, 1.875 GB), GPT-3's activations (82.141 + 193.274 =
#    275.415 GB for L 96, D 12288, H 96, S 2048, B 1) and a pipeline bubble.
# 4. Usage errors exit 2.
set -u
. "$(dirname "$0")/common.sh"
require_tools loomrun loom-memplan
LOOM_TRAIN=${LOOM_TRAIN:-$top_builddir/train/loom-train}
[ -x "$LOOM_TRAIN" ] || skip "$LOOM_TRAIN is not built (run make first)"
"$LOOM_TRAIN" -h >/dev/null 2>&1 || fail "$LOOM_TRAIN -h failed"
MEMPLAN=$top_builddir/tools/loom-memplan

# train NAME ARGS...: a checked 4-rank run that must pass; its output in $TEST_TMPDIR/NAME.log
train() {
    _name=$1
    shift
    _log=$TEST_TMPDIR/$_name.log
    run_logged "$_log" "$LOOMRUN" -n 4 "$LOOM_TRAIN" --check --steps 20 --log-every 5 "$@"
    train_check "$_log" $? "$_name" 20
}

# ledger NAME MAXDEV: measured/formula of the model state within MAXDEV of 1
ledger() {
    _ratio=$(sed -n 's/.*measured\/formula \([0-9.]*\).*/\1/p' "$TEST_TMPDIR/$1.log")
    [ -n "$_ratio" ] || { record_failure "$1: no model-state line in the ledger"; return; }
    note "$1: model state measured/formula $_ratio"
    awk -v r="$_ratio" -v m="$2" 'BEGIN { exit !(r >= 1 - m && r <= 1 + m) }' ||
        record_failure "$1: model state is $_ratio of the formula, not within $2"
}

for mode in ddp zero1 zero2 zero3 moe; do
    train "$mode" --mode "$mode"
done
train ddp-no-overlap --mode ddp --no-overlap --bucket-mb 0.1
train ddp-compare --mode ddp --compare-overlap --bucket-mb 0.1
grep -q "^time: overlap \(saves\|costs\)" "$TEST_TMPDIR/ddp-compare.log" ||
    record_failure "ddp-compare: no comparison of overlapped and blocking steps"
train ddp-bf16 --mode ddp --dtype bf16 --bucket-mb 0.1
train zero1-bf16 --mode zero1 --dtype bf16
train zero2-bf16 --mode zero2 --dtype bf16
train zero3-bf16 --mode zero3 --dtype bf16
train moe-top1 --mode moe --top-k 1
grep -q "top-1" "$TEST_TMPDIR/moe-top1.log" || record_failure "moe-top1: not routed top-1"
grep -q "top-2" "$TEST_TMPDIR/moe.log" || record_failure "moe: not routed top-2"
grep -q "formula 16 Psi/N" "$TEST_TMPDIR/zero3-bf16.log" ||
    record_failure "zero3: no 16 Psi/N formula"
ledger zero3-bf16 0.05
ledger zero1-bf16 0.05
ledger zero2-bf16 0.05
ledger ddp-bf16 0.05

# memplan OUT ARGS...: run loom-memplan, keep its output in $TEST_TMPDIR/memplan.out
memplan() {
    run_to "$TEST_TMPDIR/memplan.out" "$TEST_TMPDIR/memplan.err" "$MEMPLAN" "$@" ||
        record_failure "loom-memplan $* exited non-zero"
}

expect() {
    grep -q -- "$1" "$TEST_TMPDIR/memplan.out" || {
        show_log "$TEST_TMPDIR/memplan.out"
        record_failure "loom-memplan: no line matching '$1'"
    }
}

memplan --params 7.5B --ranks 64
expect "^  0 *DDP *16 P *120\.000$"
expect "^  1 *ZeRO-1 *4 P + 12 P/N *31\.406$"
expect "^  2 *ZeRO-2 *2 P + 14 P/N *16\.641$"
expect "^  3 *ZeRO-3 *16 P/N *1\.875$"
memplan --params 1e9 --ranks 8 --stage 3
expect "^  3 *ZeRO-3 *16 P/N *2\.000$"
grep -q "DDP" "$TEST_TMPDIR/memplan.out" && record_failure "loom-memplan --stage 3 printed DDP"
memplan --layers 96 --hidden 12288 --heads 96 --seq 2048 --batch 1 --bytes 2 --a 17 --c 2.5
expect "^  linear term .* 82\.141 GB$"
expect "^  quadratic term .* 193\.274 GB$"
expect "^  total .* 275\.415 GB$"
memplan --stages 4 --microbatches 8
expect "(p-1)/m = 0\.375$"

for bad in "--params 7.5B" "--stage 5 --params 1 --ranks 1" "--stages 4" "--frobnicate"; do
    # shellcheck disable=SC2086
    "$MEMPLAN" $bad >/dev/null 2>&1
    [ $? -eq 2 ] || record_failure "loom-memplan $bad did not exit 2"
done
"$LOOM_TRAIN" --mode bogus >/dev/null 2>&1
[ $? -eq 2 ] || record_failure "loom-train --mode bogus did not exit 2"
finish
