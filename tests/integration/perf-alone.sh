#!/bin/sh
# perf-alone.sh — the tools started by hand, with no launcher, are a job of
# one rank (as an nccl-tests binary started as one process is).
#
# loom-perf -b 8 -e 1M with none of loomrun's, mpirun's, PMIx's or Slurm's
# variables in its environment must print a 1-rank table with every result
# checked and 0 wrong, and exit 0; loom-info --comm must describe a 1-rank
# communicator. Before, both stopped with loomCommInitFromEnv's error.
set -u
. "$(dirname "$0")/common.sh"

require_tools loom-perf loom-info

# Whatever launcher ran make check, the tools must not see it.
alone="env -u LOOM_UNIQUE_ID -u LOOM_ROOT_ADDR -u LOOM_RANK -u LOOM_NRANKS -u LOOM_LOCAL_RANK \
-u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_LOCAL_RANK -u PMIX_RANK \
-u PMIX_NAMESPACE -u SLURM_PROCID -u SLURM_NTASKS -u SLURM_LOCALID -u PMI_RANK -u PMI_SIZE"

log=$TEST_TMPDIR/perf.log
# shellcheck disable=SC2086
run_logged "$log" $alone "$LOOM_PERF" -b 8 -e 1M
status=$?
if perf_check "$log" "$status" "loom-perf -b 8 -e 1M, no launcher"; then
    grep -q '^# loom-perf  nranks 1 ' "$log" || {
        record_failure "loom-perf alone: the header does not say nranks 1"
        show_log "$log"
    }
    # the sizes asked for: 8 bytes first, nothing above 1 MiB
    first=$(awk '!/^#/ && NF == 13 { print $1; exit }' "$log")
    last=$(awk '!/^#/ && NF == 13 { s = $1 } END { print s }' "$log")
    [ "$first" = 8 ] && [ "$last" -le 1048576 ] ||
        record_failure "loom-perf alone: sizes from $first to $last, not 8 to at most 1M"
fi

log=$TEST_TMPDIR/info.log
# shellcheck disable=SC2086
run_logged "$log" $alone "$LOOM_INFO" --comm
status=$?
if [ "$status" -ne 0 ] || ! grep -q '^Communicator: 1 ranks on 1 host(s)' "$log"; then
    record_failure "loom-info --comm alone: exit status $status, or not a 1-rank communicator"
    show_log "$log"
fi
finish
