# netns.sh — hosts made of network namespaces, for the multi-host tests.
#
# Sourced after tests/integration/common.sh. mn_hosts K builds K "hosts" on
# this machine, each a network namespace with its own loopback and an eth0
# (a veth) plugged into a bridge, which lives in one more namespace of its
# own, so nothing of this touches the machine's own network:
#
#   namespace PREFIX-sw:  br0 -- p1, p2, ... pK
#   namespace PREFIX-h1:  lo, eth0 = 10.231.0.1/24  (its peer p1 on br0)
#   namespace PREFIX-h2:  lo, eth0 = 10.231.0.2/24  ...
#
# A process enters host hI with `$MN_EXEC hI CMD...`, which also gives it a
# UTS namespace whose hostname is hI, so Loom (hostname + boot id) and Open
# MPI both see different hosts. mpirun is started inside h1 (so h1 is its
# own node) and reaches the others through an rsh agent that does the same
# for orted. PREFIX holds this shell's pid, so concurrent runs do not meet;
# mn_cleanup (run on exit, also after a failure) ends what still runs in
# the namespaces, by pid, and deletes them.
#
# Functions:
#   mn_require           skip (one line) unless root, ip netns, veth, bridges, unshare work
#   mn_hosts K           create hosts h1..hK
#   mn_addr HOST         its eth0 address
#   mn_rail2 K           a second rail: eth1 = 10.232.0.I/24 in hosts h1..hK, on a bridge br1
#                        of its own (in PREFIX-sw, ports q1..qK), so eth0 and eth1 are two
#                        networks, as two NICs on two switches
#   mn_cleanup           remove everything (idempotent)
# Commands (scripts written by mn_hosts, so that run/timeout can start them):
#   $MN_EXEC HOST CMD...       run CMD in HOST with hostname HOST
#   $MN_MPIRUN K M ARGS...     mpirun (inside h1) over K hosts x M slots, with the agent and ARGS

MN_PREFIX="loom$$"
MN_NET=10.231.0
MN_NET2=10.232.0
MN_HOSTS=""
MN_AGENT=$TEST_TMPDIR/rsh-agent
MN_EXEC=$TEST_TMPDIR/mn-exec
MN_MPIRUN=$TEST_TMPDIR/mn-mpirun

mn_cleanup() {
    for _ns in $MN_HOSTS $MN_PREFIX-sw; do
        ip netns list 2>/dev/null | grep -q "^$_ns\b" || continue
        # Whatever the job left (mpirun, orted, ranks), ended by pid.
        for _pid in $(ip netns pids "$_ns" 2>/dev/null); do
            kill -9 "$_pid" 2>/dev/null
        done
        ip netns del "$_ns" 2>/dev/null
    done
    MN_HOSTS=""
}

mn_require() {
    [ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces (run make check as root)"
    command -v ip >/dev/null 2>&1 || skip "needs ip(8) from iproute2"
    command -v unshare >/dev/null 2>&1 || skip "needs unshare(1) for per-host hostnames"
    command -v mpirun >/dev/null 2>&1 || skip "needs Open MPI's mpirun"
    ip netns add "$MN_PREFIX-probe" 2>/dev/null || skip "ip netns add fails here (no network namespaces)"
    _ok=1
    ip -n "$MN_PREFIX-probe" link add br0 type bridge 2>/dev/null || _ok=0
    ip -n "$MN_PREFIX-probe" link add v0 type veth peer name v1 2>/dev/null || _ok=0
    ip netns exec "$MN_PREFIX-probe" unshare --uts true 2>/dev/null || _ok=0
    ip netns del "$MN_PREFIX-probe"
    [ $_ok -eq 1 ] || skip "bridges, veth pairs or UTS namespaces are not available here"
}

mn_hosts() {
    _sw=$MN_PREFIX-sw
    ip netns add "$_sw" || fail "cannot create namespace $_sw"
    ip -n "$_sw" link add br0 type bridge && ip -n "$_sw" link set br0 up ||
        fail "cannot create the bridge in $_sw"
    _i=1
    while [ "$_i" -le "$1" ]; do
        _ns=$MN_PREFIX-h$_i
        ip netns add "$_ns" || fail "cannot create namespace $_ns"
        MN_HOSTS="$MN_HOSTS $_ns"
        ip link add eth0 netns "$_ns" type veth peer name "p$_i" netns "$_sw" &&
            ip -n "$_sw" link set "p$_i" master br0 && ip -n "$_sw" link set "p$_i" up &&
            ip -n "$_ns" link set lo up && ip -n "$_ns" addr add "$MN_NET.$_i/24" dev eth0 &&
            ip -n "$_ns" link set eth0 up || fail "cannot wire host h$_i"
        _i=$((_i + 1))
    done
    cat >"$MN_AGENT" <<EOS
#!/bin/sh
# rsh agent for mpirun: "agent HOST COMMAND..." runs COMMAND in namespace host HOST.
host=\$1
shift
exec ip netns exec "$MN_PREFIX-\$host" unshare --uts sh -c "hostname \$host && exec \$*"
EOS
    cat >"$MN_EXEC" <<EOS
#!/bin/sh
# mn-exec HOST CMD...: CMD in namespace host HOST, with hostname HOST.
host=\$1
shift
exec ip netns exec "$MN_PREFIX-\$host" unshare --uts sh -c 'hostname "\$0" && exec "\$@"' "\$host" "\$@"
EOS
    cat >"$MN_MPIRUN" <<EOS
#!/bin/sh
# mn-mpirun K M ARGS...: mpirun started in h1 over hosts h1..hK with M slots each.
k=\$1
m=\$2
shift 2
hostfile=$TEST_TMPDIR/hosts-\$k-\$m
: >"\$hostfile"
i=1
while [ "\$i" -le "\$k" ]; do
    echo "h\$i slots=\$m" >>"\$hostfile"
    i=\$((i + 1))
done
# Session directories under this test's own directory: the hosts of two tests run at once
# share host names and /tmp, where Open MPI's /tmp/ompi.HOST.UID would collide ("File exists").
mkdir -p "$TEST_TMPDIR/ompi"
# --bind-to none: each host sees all of this machine's cores and would bind its first rank
# to core 0, so with one rank a host every rank of the job would run on the same core.
exec "$MN_EXEC" h1 mpirun --allow-run-as-root --hostfile "\$hostfile" -np \$((k * m)) \\
    --bind-to none --mca orte_tmpdir_base "$TEST_TMPDIR/ompi" \\
    --mca plm_rsh_agent "$MN_AGENT" --mca oob_tcp_if_include eth0 \\
    --mca btl tcp,self --mca btl_tcp_if_include eth0 "\$@"
EOS
    chmod +x "$MN_AGENT" "$MN_EXEC" "$MN_MPIRUN"
}

mn_rail2() {
    _sw=$MN_PREFIX-sw
    ip -n "$_sw" link add br1 type bridge && ip -n "$_sw" link set br1 up ||
        fail "cannot create the second bridge in $_sw"
    _i=1
    while [ "$_i" -le "$1" ]; do
        _ns=$MN_PREFIX-h$_i
        ip link add eth1 netns "$_ns" type veth peer name "q$_i" netns "$_sw" &&
            ip -n "$_sw" link set "q$_i" master br1 && ip -n "$_sw" link set "q$_i" up &&
            ip -n "$_ns" addr add "$MN_NET2.$_i/24" dev eth1 && ip -n "$_ns" link set eth1 up ||
            fail "cannot wire host h$_i's second rail"
        _i=$((_i + 1))
    done
}

mn_addr() {
    echo "$MN_NET.${1#h}"
}
