#!/bin/sh
# tls.sh — LOOM_NET_TLS=1 between two namespace hosts (netns.sh), seen on the wire.
#
# Two hosts, one rank each, joined through LOOM_ROOT_ADDR on h1; the ranks
# broadcast 4 MiB that repeat a known plaintext (tests/multinode/canary.c)
# over NET/socket (2 sockets a connection, a helper thread) while tcpdump
# captures the bridge between the hosts:
#   plain       without LOOM_NET_TLS the plaintext is in the capture
#   tls         with LOOM_NET_TLS=1 on both it is not, and the bytes arrive
#               intact (the ranks check them)
#   other key   rank 1 holds another job's id (so another key): it is refused
#               at once with a line naming the TLS handshake; rank 0 gives up
#               at LOOM_TIMEOUT (5 s), as for any stranger
#   no setting  rank 1 without LOOM_NET_TLS: refused with a line naming
#               LOOM_NET_TLS
#   sigpipe     check_bootstrap's allgather_size_mismatch under TLS: a rank
#               whose peer left reports it and is not killed by SIGPIPE
# Skipped, in one line, unless root with network namespaces, tcpdump
# (apt-get install tcpdump) and a build with TLS (configure's tls=yes).
set -u
. "$(dirname "$0")/../integration/common.sh"
. "$(dirname "$0")/netns.sh"

CANARY=$top_builddir/tests/multinode/canary
PATTERN=LOOM-PLAINTEXT-CANARY-7f3a9c
[ -x "$CANARY" ] || skip "$CANARY is not built (run make check)"
"$top_builddir/tools/loom-info" | grep -q "tls=yes" ||
    skip "this build has no TLS (configure found no OpenSSL 3: apt-get install libssl-dev)"
command -v tcpdump >/dev/null 2>&1 || skip "needs tcpdump to capture the bridge (apt-get install tcpdump)"
mn_require
trap 'mn_cleanup; [ -n "${KEEP_TMP:-}" ] || rm -rf "$TEST_TMPDIR"' EXIT
trap 'mn_cleanup; rm -rf "$TEST_TMPDIR"; exit 130' INT TERM
mn_hosts 2
port=$((21000 + $$ % 20000))

# capture_start NAME: tcpdump on the bridge into $TEST_TMPDIR/NAME.pcap, once it listens
capture_start() {
    ip netns exec "$MN_PREFIX-sw" tcpdump -i br0 -U -s 0 -w "$TEST_TMPDIR/$1.pcap" tcp \
        2>"$TEST_TMPDIR/$1.tcpdump" &
    cap_pid=$!
    for _ in $(seq 50); do
        grep -q "listening on" "$TEST_TMPDIR/$1.tcpdump" 2>/dev/null && return 0
        sleep 0.1
    done
    fail "tcpdump did not start: $(cat "$TEST_TMPDIR/$1.tcpdump")"
}
capture_stop() {
    sleep 0.5
    kill -INT "$cap_pid" 2>/dev/null
    wait "$cap_pid" 2>/dev/null
}
# run_pair NAME "ENV0" "ENV1": rank 0 on h1 and rank 1 on h2 with those settings
run_pair() {
    port=$((port + 1))
    for r in 0 1; do
        eval "envs=\$$((r + 2))"
        # shellcheck disable=SC2086 # envs is a list of VAR=value words
        timeout 60 "$MN_EXEC" "h$((r + 1))" env OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=2 \
            LOOM_ROOT_ADDR="$(mn_addr h1):$port" LOOM_SOCKET_IFNAME=eth0 LOOM_TIMEOUT=5 \
            LOOM_SOCKET_NSOCKS=2 LOOM_SOCKET_NTHREADS=1 LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=NET \
            $envs "$CANARY" >"$TEST_TMPDIR/$1.$r" 2>&1 &
        eval "pid$r=\$!"
    done
    wait "$pid0"
    eval "$1_rc0=$?"
    wait "$pid1"
    eval "$1_rc1=$?"
    for r in 0 1; do
        sed "s/^/    $1 rank $r: /" "$TEST_TMPDIR/$1.$r" | grep -v "INFO NET NET"
    done
}
found() { grep -a -c -F "$PATTERN" "$TEST_TMPDIR/$1.pcap"; }

capture_start plain
run_pair plain "" ""
capture_stop
[ "$plain_rc0" -eq 0 ] && [ "$plain_rc1" -eq 0 ] || record_failure "the plain run failed"
n=$(found plain)
echo "    plain: the plaintext is in $n packet(s) of the capture"
[ "$n" -gt 0 ] || record_failure "without TLS the plaintext is not in the capture: the capture sees nothing"

capture_start tls
run_pair tls "LOOM_NET_TLS=1" "LOOM_NET_TLS=1"
capture_stop
[ "$tls_rc0" -eq 0 ] && [ "$tls_rc1" -eq 0 ] || record_failure "the run with LOOM_NET_TLS=1 failed"
grep -q "canary: ok" "$TEST_TMPDIR/tls.1" || record_failure "rank 1 did not get the bytes intact over TLS"
n=$(found tls)
echo "    tls: the plaintext is in $n packet(s) of the capture; $(grep -h -o "TLS 1.3.*" "$TEST_TMPDIR/tls.0" | head -1)"
[ "$n" -eq 0 ] || record_failure "with LOOM_NET_TLS=1 the plaintext is on the wire"
grep -q "TLS 1.3" "$TEST_TMPDIR/tls.0" || record_failure "rank 0 did not say TLS was up"
# The capture did see that traffic: about as many bytes as the plain one.
psize=$(wc -c <"$TEST_TMPDIR/plain.pcap")
tsize=$(wc -c <"$TEST_TMPDIR/tls.pcap")
echo "    captures: plain $psize bytes, tls $tsize bytes; tcpdump: $(grep -h captured "$TEST_TMPDIR"/*.tcpdump | tr '\n' ' ')"
[ "$tsize" -gt $((psize / 2)) ] ||
    record_failure "the TLS capture holds less than half the plain one: did it see the traffic?"

start=$(date +%s)
run_pair key "LOOM_NET_TLS=1" "LOOM_NET_TLS=1 OMPI_MCA_ess_base_jobid=other"
[ "$key_rc0" -ne 0 ] && [ "$key_rc1" -ne 0 ] || record_failure "ranks with different keys did not both fail"
grep -q "canary: cannot join: .*TLS handshake with .* failed" "$TEST_TMPDIR/key.1" ||
    record_failure "rank 1 with another key was not refused with a line about the TLS handshake"
[ "$(($(date +%s) - start))" -lt 30 ] || record_failure "the ranks with different keys took 30 s or more"

run_pair nosetting "LOOM_NET_TLS=1" ""
[ "$nosetting_rc1" -ne 0 ] || record_failure "rank 1 without LOOM_NET_TLS joined a job with it"
grep -q "canary: cannot join: .*LOOM_NET_TLS differs: it is 0 here" "$TEST_TMPDIR/nosetting.1" ||
    record_failure "rank 1 without LOOM_NET_TLS was not refused with a line naming the setting"

# A peer that leaves in the middle of an allgather, under TLS: the survivor's write to the
# reset socket is an error it reports, not a SIGPIPE that kills it (OpenSSL writes with
# write(); tls.c sends with MSG_NOSIGNAL).
LOOM_NET_TLS=1 CK_RUN_CASE=allgather_size_mismatch "$top_builddir/tests/unit/check_bootstrap" \
    >"$TEST_TMPDIR/sigpipe.log" 2>&1 ||
    record_failure "a peer leaving under TLS: $(grep -v '^rank' "$TEST_TMPDIR/sigpipe.log" | tail -1)"
finish
