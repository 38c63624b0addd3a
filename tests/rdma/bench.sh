#!/bin/sh
# bench.sh — side by side on soft-RoCE, inside the guest (tests/rdma/run
# tests/rdma/bench.sh): a 2-rank AllReduce over InfiniBand verbs (2 fake
# hosts, LOOM_NET=ib) against ib_write_bw on the same device, rounds
# interleaved, with the same AllReduce over TCP in the same guest as a
# second peer. Everything shares the guest's emulated CPUs, so only the
# ratios mean anything. Prints figures; asserts nothing but that each ran.
#
#   LOOM_BENCH_ROUNDS  rounds (3)
#   LOOM_BENCH_BYTES   message size (1M)
set -u
. "$top_srcdir/tests/integration/common.sh"
require_tools loomrun loom-perf
[ -e /sys/class/infiniband/rxe0 ] || skip "no soft-RoCE device rxe0 (run me through tests/rdma/run)"
rounds=${LOOM_BENCH_ROUNDS:-3}
bytes=${LOOM_BENCH_BYTES:-1M}
export LOOM_SPIN=0
fakehost_init

# ib_write_bw, server and client on rxe0 (GID 1, RoCE v2): its average in MB/s (1e6 bytes).
writebw() {
    n=$(numfmt --from=iec "$bytes")
    ib_write_bw -d rxe0 -x 1 -s "$n" -n 100 -F --report_gbits >"$TEST_TMPDIR/srv.log" 2>&1 &
    srv=$!
    sleep 1
    timeout 120 ib_write_bw -d rxe0 -x 1 -s "$n" -n 100 -F --report_gbits 10.0.2.15 \
        >"$TEST_TMPDIR/cli.log" 2>&1
    wait "$srv"
    awk -v n="$n" '$1 == n && NF >= 5 { printf "%.1f", $4 * 125 }' "$TEST_TMPDIR/cli.log"
}

# busbw NET: 2-rank AllReduce busbw at $bytes over NET, out of place, in MB/s (1e6 bytes; at
# 2 ranks busbw = algbw = bytes / time), from the time column (the busbw column has 2 decimals of GB/s).
busbw() {
    LOOM_NET=$1 timeout 300 "$LOOMRUN" -n 2 "$FAKE" 1 "$LOOM_PERF" -C allreduce \
        -b "$bytes" -e "$bytes" -n 10 -w 2 -c 0 >"$TEST_TMPDIR/perf.log" 2>&1
    awk '!/^#/ && NF == 13 { printf "%.1f", $1 / $6 }' "$TEST_TMPDIR/perf.log"
}

printf "%-6s %-18s %-22s %-22s %s\n" round "ib_write_bw" "AllReduce busbw, IB" "AllReduce busbw, TCP" \
    "IB/ib_write_bw"
i=1
while [ "$i" -le "$rounds" ]; do
    w=$(writebw)
    a=$(busbw ib)
    t=$(busbw socket)
    [ -n "$w" ] || fail "ib_write_bw gave no figure: $(tail -n 3 "$TEST_TMPDIR/cli.log")"
    [ -n "$a" ] && [ -n "$t" ] || fail "loom-perf gave no figure: $(tail -n 3 "$TEST_TMPDIR/perf.log")"
    printf "%-6s %-18s %-22s %-22s %s\n" "$i" "$w MB/s" "$a MB/s" "$t MB/s" \
        "$(awk -v a="$a" -v w="$w" 'BEGIN { printf "%.2f", a / w }')"
    i=$((i + 1))
done
note "message $bytes; ib_write_bw -n 100, loom-perf -n 10 -w 2; $(nproc) emulated CPU(s) for all of it"
