#!/bin/sh
# bench.sh — side by side on soft-RoCE, inside the guest (tests/rdma/run
# tests/rdma/bench.sh): a 2-rank AllReduce over InfiniBand verbs (2 fake
# hosts, LOOM_NET=ib) against ib_write_bw on the same device, rounds
# interleaved, with the same AllReduce over TCP in the same guest as a
# second peer. Everything shares the guest's one emulated CPU, so only the
# ratios mean anything. Prints figures; asserts nothing but that each ran.
#
#   LOOM_BENCH_ROUNDS  rounds (3)
#   LOOM_BENCH_BYTES   message size (4M)
set -u
. "$top_srcdir/tests/integration/common.sh"
require_tools loomrun loom-perf
[ -e /sys/class/infiniband/rxe0 ] || skip "no soft-RoCE device rxe0 (run me through tests/rdma/run)"
rounds=${LOOM_BENCH_ROUNDS:-3}
bytes=${LOOM_BENCH_BYTES:-4M}
export LOOM_SPIN=0
cat >"$TEST_TMPDIR/fakehost" <<'EOS'
#!/bin/sh
LOOM_HOSTID=fake$LOOM_RANK exec "$@"
EOS
chmod +x "$TEST_TMPDIR/fakehost"

# ib_write_bw, server and client on rxe0 (GID 1, RoCE v2): its average in GB/s (1e9 bytes).
writebw() {
    n=$(numfmt --from=iec "$bytes")
    ib_write_bw -d rxe0 -x 1 -s "$n" -n 100 -F --report_gbits >"$TEST_TMPDIR/srv.log" 2>&1 &
    srv=$!
    sleep 1
    timeout 120 ib_write_bw -d rxe0 -x 1 -s "$n" -n 100 -F --report_gbits 10.0.2.15 \
        >"$TEST_TMPDIR/cli.log" 2>&1
    wait "$srv"
    awk -v n="$n" '$1 == n && NF >= 5 { printf "%.3f", $4 / 8 }' "$TEST_TMPDIR/cli.log"
}

# busbw NET: 2-rank AllReduce busbw (GB/s, out of place) at $bytes over NET.
busbw() {
    LOOM_NET=$1 timeout 300 "$LOOMRUN" -n 2 "$TEST_TMPDIR/fakehost" "$LOOM_PERF" -C allreduce \
        -b "$bytes" -e "$bytes" -n 10 -w 2 -c 0 >"$TEST_TMPDIR/perf.log" 2>&1
    awk '!/^#/ && NF == 13 { print $8 }' "$TEST_TMPDIR/perf.log"
}

printf "%-6s %-14s %-16s %-16s %s\n" round "ib_write_bw" "allreduce ib" "allreduce tcp" "ib/ib_write_bw"
i=1
while [ "$i" -le "$rounds" ]; do
    w=$(writebw)
    a=$(busbw ib)
    t=$(busbw socket)
    [ -n "$w" ] || fail "ib_write_bw gave no figure: $(tail -n 3 "$TEST_TMPDIR/cli.log")"
    [ -n "$a" ] && [ -n "$t" ] || fail "loom-perf gave no figure: $(tail -n 3 "$TEST_TMPDIR/perf.log")"
    printf "%-6s %-14s %-16s %-16s %s\n" "$i" "$w GB/s" "$a GB/s busbw" "$t GB/s busbw" \
        "$(awk -v a="$a" -v w="$w" 'BEGIN { printf "%.2f", a / w }')"
    i=$((i + 1))
done
note "message $bytes; ib_write_bw -n 100, loom-perf -n 10 -w 2; one emulated CPU for all of it"
