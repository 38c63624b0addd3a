#!/bin/sh
# train-parallel.sh — loom-train's model with attention, tensor, pipeline
# and sequence parallelism, their combination with data parallelism, and
# activation checkpointing, each checked against the single-process reference:
#
# 1. --heads 4 (self-attention in every block) under ddp (fp32) and zero3
#    (bf16) on 2 ranks.
# 2. --tp 2 on 2 ranks, fp32 and bf16: heads and MLP columns split, the
#    partial sums AllReduced on the TP communicator.
# 3. --pp 2 on 2 ranks and --pp 4 on 4 ranks, each with --schedule gpipe and
#    1f1b: the schedule's idle/compute ratio printed is (p-1)/m exactly, and
#    1F1B holds p micro-batches' activations at most where GPipe holds m.
# 4. --sp 2 and --sp 4 (ring attention), fp32, and --sp 2 in bf16.
# 5. --tp 2 --pp 2 on 8 ranks, 2 data-parallel replicas under ddp and
#    zero1-3 (zero1-3 in fp32 and bf16): the run prints the transport of
#    each of its communicators, and each ZeRO ledger matches its formula
#    within 5% (zero2's gradients half of zero1's).
# 6. --checkpoint 2 (6 blocks; fp32 under ddp, bf16 under zero3): the same
#    losses, bit for bit, as without, fewer activation bytes, and the ledger
#    line beside loom-memplan --checkpoint's estimate, which loom-memplan
#    itself prints for the same shape.
# 7. Usage errors exit 2.
set -u
. "$(dirname "$0")/common.sh"
require_tools loomrun
LOOM_TRAIN=${LOOM_TRAIN:-$top_builddir/train/loom-train}
[ -x "$LOOM_TRAIN" ] || skip "$LOOM_TRAIN is not built (run make first)"

# train NAME RANKS ARGS...: a checked run of 10 steps that must pass; its output in NAME.log
train() {
    _name=$1
    _n=$2
    shift 2
    _log=$TEST_TMPDIR/$_name.log
    run_logged "$_log" "$LOOMRUN" -n "$_n" "$LOOM_TRAIN" --check --steps 10 --log-every 10 \
        --heads 4 "$@"
    train_check "$_log" $? "$_name" 10
}

# expect NAME PATTERN: NAME.log has a line matching PATTERN
expect() {
    grep -q -- "$2" "$TEST_TMPDIR/$1.log" || {
        show_log "$TEST_TMPDIR/$1.log"
        record_failure "$1: no line matching '$2'"
    }
}

train attn-ddp 2 --mode ddp
expect attn-ddp "attention of 4 heads over sequences of 8"
train attn-zero3-bf16 2 --mode zero3 --dtype bf16
train tp2 2 --tp 2
expect tp2 "dp 1 x pp 1 x sp 1 x tp 2"
train tp2-bf16 2 --tp 2 --dtype bf16
for sched in gpipe 1f1b; do
    train pp2-$sched 2 --pp 2 --microbatches 4 --schedule $sched --dtype bf16
    expect pp2-$sched "^pipeline: $sched, 2 stages x 4 micro-batches: .* idle/compute 0\.2500), (p-1)/m = 0\.2500$"
    expect pp2-$sched "^pipeline: activations in flight at most (stage 0): 1f1b 2 micro-batches, gpipe 4$"
    train pp4-$sched 4 --pp 4 --microbatches 8 --seq 4 --schedule $sched
    expect pp4-$sched "^pipeline: $sched, 4 stages x 8 micro-batches: .* idle/compute 0\.3750), (p-1)/m = 0\.3750$"
    expect pp4-$sched "^pipeline: activations in flight at most (stage 0): 1f1b 4 micro-batches, gpipe 8$"
    expect pp4-$sched "^pipeline: measured share .* stage 3 [0-9.]*%$"
done
train sp2 2 --sp 2
train sp4 4 --sp 4
train sp2-bf16 2 --sp 2 --dtype bf16
expect sp4 "dp 1 x pp 1 x sp 4 x tp 1"

train 3d-ddp 8 --tp 2 --pp 2 --microbatches 4
expect 3d-ddp "dp 2 x pp 2 x sp 1 x tp 2"
expect 3d-ddp "^parallel: placement packed: every TP group inside one host$"
for c in tp pp dp; do
    expect 3d-ddp "^rank 7: $c communicator of 2: 1->0 shm"
    # and its place in the two trees of 2 ranks: the root of one, under 0 in the other
    expect 3d-ddp "^rank 7: $c communicator .*; tree 0 .*; tree 1 .*"
done
grep "^rank 7: tp communicator" "$TEST_TMPDIR/3d-ddp.log" | grep -q "root down 0" ||
    record_failure "3d-ddp: rank 7 is the root of neither TP tree"

# ledger NAME FORMULA: NAME.log prints FORMULA, and measures within 5% of it
ledger() {
    expect "$1" "formula $2 Psi/(TP PP), R = dp sp"
    _ratio=$(sed -n 's/.*measured\/formula \([0-9.]*\).*/\1/p' "$TEST_TMPDIR/$1.log")
    awk -v r="${_ratio:-0}" 'BEGIN { exit !(r >= 0.95 && r <= 1.05) }' ||
        record_failure "$1: model state is ${_ratio:-missing} of the formula"
}
train 3d-zero1 8 --tp 2 --pp 2 --microbatches 4 --mode zero1
train 3d-zero1-bf16 8 --tp 2 --pp 2 --microbatches 4 --mode zero1 --dtype bf16
ledger 3d-zero1-bf16 "(4 + 12/R)"
train 3d-zero2 8 --tp 2 --pp 2 --microbatches 4 --mode zero2
ledger 3d-zero2 "(4 + 12/R)"
# fp32's formula is zero1's: the gradients are what moved, half of zero1's on 2 replicas
grads() { awk '$1 == "gradients" { print $2 }' "$TEST_TMPDIR/$1.log"; }
[ "$(grads 3d-zero1)" = "$(($(grads 3d-zero2) * 2))" ] ||
    record_failure "3d-zero2: gradients $(grads 3d-zero2) B, not half of zero1's $(grads 3d-zero1) B"
train 3d-zero2-bf16 8 --tp 2 --pp 2 --microbatches 4 --mode zero2 --dtype bf16
ledger 3d-zero2-bf16 "(2 + 14/R)"
train 3d-zero3 8 --tp 2 --pp 2 --microbatches 4 --mode zero3
ledger 3d-zero3 "16/R"
train 3d-zero3-bf16 8 --tp 2 --pp 2 --microbatches 4 --mode zero3 --dtype bf16
ledger 3d-zero3-bf16 "16/R"

# checkpoint NAME ARGS...: the same run with and without --checkpoint 2
checkpoint() {
    _cname=$1
    shift
    train "$_cname-all" 2 --layers 6 --log-every 1 "$@"
    train "$_cname" 2 --layers 6 --log-every 1 --checkpoint 2 "$@"
    _with=$(grep "^step" "$TEST_TMPDIR/$_cname.log" | awk '{ print $2, $4 }')
    _without=$(grep "^step" "$TEST_TMPDIR/$_cname-all.log" | awk '{ print $2, $4 }')
    [ -n "$_with" ] && [ "$_with" = "$_without" ] ||
        record_failure "$_cname: the losses differ from those without --checkpoint"
    expect "$_cname" "^  activation checkpointing every 2 blocks: .*(2 of 6 blocks"
    _m=$(sed -n 's/^  activations  *\([0-9]*\) B.*/\1/p' "$TEST_TMPDIR/$_cname.log")
    _a=$(sed -n 's/^  activations  *\([0-9]*\) B.*/\1/p' "$TEST_TMPDIR/$_cname-all.log")
    [ "${_m:-0}" -gt 0 ] && [ "${_m:-0}" -lt "${_a:-0}" ] ||
        record_failure "$_cname: activations ${_m:-?} B with --checkpoint, ${_a:-?} B without"
    expect "$_cname" "^  activation checkpointing .*; ${_a:-?} B without"
}
checkpoint ckpt --mode ddp
checkpoint ckpt-zero3-bf16 --mode zero3 --dtype bf16
est=$(sed -n 's/^  loom-memplan .*: \([0-9]*\) B with, \([0-9]*\) B without.*/\1 \2/p' \
    "$TEST_TMPDIR/ckpt.log")
"$top_builddir/tools/loom-memplan" --layers 6 --hidden 64 --heads 4 --seq 8 --batch 4 \
    --bytes 4 --a 16 --c 1 --checkpoint 2 >"$TEST_TMPDIR/memplan.log" 2>&1 ||
    record_failure "loom-memplan --checkpoint 2 failed"
plan=$(awk '/total with checkpointing/ { w = $(NF - 1) } /^  without/ { o = $(NF - 1) }
    END { print w, o }' "$TEST_TMPDIR/memplan.log")
[ -n "$est" ] && [ "$est" = "$plan" ] ||
    record_failure "ckpt: loom-train's estimate ($est) is not loom-memplan's ($plan)"

for bad in "--tp 3 --heads 4" "--pp 9" "--pp 2 --microbatches 3" "--schedule bogus" \
    "--tp 2 --mode moe" "--heads 3" "--sp 2" "--sp 3 --heads 4" "--checkpoint 2 --mode moe" \
    "--placement bogus"; do
    # shellcheck disable=SC2086
    "$LOOM_TRAIN" $bad >/dev/null 2>&1
    [ $? -eq 2 ] || record_failure "loom-train $bad did not exit 2"
done
"$LOOMRUN" -n 3 "$LOOM_TRAIN" --tp 2 >"$TEST_TMPDIR/odd.log" 2>&1
[ $? -ne 0 ] || record_failure "loom-train --tp 2 on 3 ranks did not fail"
expect odd "not a multiple of --tp x --pp x --sp"
finish
