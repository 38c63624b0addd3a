#!/bin/sh
# compress.sh — float32 AllReduce and ReduceScatter as bfloat16 on the wire
# (LOOM_NET_COMPRESS, loomConfig_t.netCompress), between ranks of this machine.
#
# LOOM_SHM_DISABLE=1 puts every link on TCP; LOOM_HOSTID (the fake-host wrapper)
# makes some links TCP and the others shared memory.
#
# 1. tests/integration/compress (the error bound of loom(7), bfloat16 on the
#    wire, the same bits on every rank, float64 untouched, and refused where a
#    config forces it) at 2, 3 and 4 ranks over TCP, to nearest even and
#    stochastic; on 2 fake hosts x 2 ranks (shm inside a host); through the tree;
#    and where doubling is asked for (compression runs a ring instead).
# 2. The check can fail: without LOOM_NET_COMPRESS its environment case must
#    find float32 on the wire. Ranks that disagree about LOOM_NET_COMPRESS
#    are told so (a message of half or twice the size), not left hanging.
# 3. What compression leaves alone is exact: loom-perf's checks of every
#    collective on float64 and int32 over TCP, and on float32 over shared
#    memory, with LOOM_NET_COMPRESS=bf16.
# 4. loom-train --mode ddp --check passes with it on (2 fake hosts x 2 ranks,
#    both roundings): the check takes bf16 mode's tolerances.
# shellcheck disable=SC2086 # SIZES is a word list, split on purpose
set -u
. "$(dirname "$0")/common.sh"
require_tools loomrun loom-perf
PROG=$top_builddir/tests/integration/compress
[ -x "$PROG" ] || skip "tests/integration/compress is not built"

LOOM_TIMEOUT=${LOOM_TIMEOUT:-60}
LOOM_SPIN=0
export LOOM_TIMEOUT LOOM_SPIN
SIZES="-b 4 -e 70000 -f 7"
fakehost_init

# compress_case NAME NRANKS MODE [VAR=value ...] [-- WRAPPER...]: every rank says all checks hold.
compress_case() {
    _name=$1 _n=$2 _mode=$3
    shift 3
    _log=$TEST_TMPDIR/$_name.log
    run_logged "$_log" env LOOM_NET_COMPRESS="$_mode" "$@" "$LOOMRUN" -n "$_n" --timeout 240 \
        $WRAP "$PROG" "$_mode"
    _st=$?
    if [ $_st -ne 0 ] || [ "$(grep -c "all checks hold" "$_log")" -ne "$_n" ] ||
        ! grep -q "refused: .*float32 only, not float64" "$_log"; then
        record_failure "$_name: $_n ranks, $_mode: status $_st"
        show_log "$_log"
    fi
}

# 1. The bound, at 2, 3 and 4 ranks over TCP.
WRAP=
for n in 2 3 4; do
    compress_case "tcp$n" $n bf16 LOOM_SHM_DISABLE=1
done
compress_case tcp3sr 3 bf16-sr LOOM_SHM_DISABLE=1
compress_case tcp4sr 4 bf16-sr LOOM_SHM_DISABLE=1
compress_case tcp3doubling 3 bf16 LOOM_SHM_DISABLE=1 LOOM_ALGO=doubling
WRAP="$FAKE 2"
compress_case mixed4 4 bf16 LOOM_NCHANNELS=2 LOOM_BUFFSIZE=16K
WRAP="$FAKE 1"
compress_case tree4 4 bf16 LOOM_ALGO=tree LOOM_BUFFSIZE=16K

# 2. Without compression the same program must see float32 on the wire.
log=$TEST_TMPDIR/off.log
run_logged "$log" "$LOOMRUN" -n 2 --timeout 240 env LOOM_SHM_DISABLE=1 "$PROG" bf16
if [ $? -eq 0 ] || ! grep -q "env: AllReduce sum: some results are not bfloat16" "$log"; then
    record_failure "without LOOM_NET_COMPRESS the check did not find float32 on the wire"
    show_log "$log"
fi

cat >"$TEST_TMPDIR/rank0only" <<'EOS'
#!/bin/sh
[ "$LOOM_RANK" = 0 ] && export LOOM_NET_COMPRESS=bf16
exec "$@"
EOS
chmod +x "$TEST_TMPDIR/rank0only"
log=$TEST_TMPDIR/differ.log
LOOM_SHM_DISABLE=1 run_logged "$log" "$LOOMRUN" -n 2 --timeout 120 "$TEST_TMPDIR/rank0only" \
    "$LOOM_PERF" -C allreduce -d float -b 1M -e 1M -n 1 -w 0 -c 1
# loomrun ends the other rank when the first one exits, so one line may be all there is.
if [ $? -eq 0 ] || ! grep -q "or LOOM_NET_COMPRESS differs between them" "$log"; then
    record_failure "ranks that disagree about LOOM_NET_COMPRESS were not told so"
    show_log "$log"
fi

# 3. Exact where compression does not apply.
for dt in float64 int32; do
    log=$TEST_TMPDIR/$dt.log
    LOOM_NET_COMPRESS=bf16 LOOM_SHM_DISABLE=1 run_logged "$log" "$LOOMRUN" -n 3 --timeout 240 \
        "$LOOM_PERF" -c 1 -n 1 -w 0 -C all -d $dt -o all -r all $SIZES
    perf_check "$log" $? "3 ranks over TCP, LOOM_NET_COMPRESS=bf16, $dt"
done
log=$TEST_TMPDIR/shm.log
LOOM_NET_COMPRESS=bf16 run_logged "$log" "$LOOMRUN" -n 3 --timeout 240 \
    "$LOOM_PERF" -c 1 -n 1 -w 0 -C all -d float -o all -r all $SIZES
perf_check "$log" $? "3 ranks over shared memory, LOOM_NET_COMPRESS=bf16, float32"

# 4. Training.
LOOM_TRAIN=$top_builddir/train/loom-train
if [ -x "$LOOM_TRAIN" ]; then
    for mode in bf16 bf16-sr; do
        log=$TEST_TMPDIR/ddp-$mode.log
        LOOM_NET_COMPRESS=$mode run_logged "$log" "$LOOMRUN" -n 4 --timeout 240 "$FAKE" 2 \
            "$LOOM_TRAIN" --mode ddp --check --steps 20 --log-every 5
        train_check "$log" $? "ddp, LOOM_NET_COMPRESS=$mode" 20
    done
else
    note "loom-train is not built: no training check"
fi

finish
