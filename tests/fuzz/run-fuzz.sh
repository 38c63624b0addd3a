#!/bin/sh
# run-fuzz.sh — fuzz the bootstrap message decoders with libFuzzer for a bounded time.
#
#   tests/fuzz/run-fuzz.sh [SECONDS] [--merge]
#
# Builds tests/fuzz/fuzz_bootstrap.c with clang -fsanitize=fuzzer,address,undefined
# against the bootstrap sources, and runs it for SECONDS (default 60) on a scratch
# copy of tests/fuzz/corpus/bootstrap, on every core. A crash leaves the input as
# crash-* in the scratch directory (printed) and makes the script exit 1; add the
# input to the corpus once fixed, so that make check replays it from then on.
# --merge adds the inputs that reached new code to the corpus (minimised by
# libFuzzer's -merge=1).
#
# Needs clang with the libFuzzer runtime (Debian: clang-14, libclang-rt-14-dev if
# it is packaged apart) and a configured tree (for config.h). Not part of make check.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${top_builddir:-$top}
seconds=60
merge=0
for a in "$@"; do
    case $a in
    --merge) merge=1 ;;
    *[!0-9]* | "") echo "usage: $0 [SECONDS] [--merge]" >&2; exit 2 ;;
    *) seconds=$a ;;
    esac
done
CLANG=${CLANG:-clang}
command -v "$CLANG" >/dev/null 2>&1 || { echo "run-fuzz: $CLANG not found (apt-get install clang)" >&2; exit 2; }
[ -f "$build/config.h" ] || { echo "run-fuzz: no config.h in $build: run ./configure first" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/loom-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "run-fuzz: building with $CLANG -fsanitize=fuzzer,address,undefined"
"$CLANG" -g -O1 -std=gnu11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -I"$build" -I"$top/include" -I"$top/algorithms" -I"$top/src/base" \
    "$here/fuzz_bootstrap.c" "$top"/src/base/boot*.c "$top/src/base/socket.c" \
    "$top/src/base/debug.c" "$top/src/base/param.c" -lpthread -o "$work/fuzz_bootstrap"

mkdir "$work/corpus" "$work/crashes"
cp "$here/corpus/bootstrap/"* "$work/corpus/"
before=$(ls "$work/corpus" | wc -l)
jobs=$(nproc 2>/dev/null || echo 1)
echo "run-fuzz: $seconds s on $jobs core(s), from $before corpus inputs"
status=0
(cd "$work/crashes" && "$work/fuzz_bootstrap" -max_total_time="$seconds" -max_len=2048 \
    -workers="$jobs" -jobs="$jobs" -print_final_stats=1 "$work/corpus" >"$work/log" 2>&1) ||
    status=$?
grep -h -E "stat::number_of_executed_units|stat::peak_rss_mb" "$work/crashes"/fuzz-*.log 2>/dev/null |
    awk '{ s[$1] += $2 } END { for (k in s) print "run-fuzz: " k " " s[k] }' | sort
crashes=$(ls "$work/crashes" | grep -E '^(crash|leak|timeout|oom)-' || true)
if [ -n "$crashes" ] || [ "$status" -ne 0 ]; then
    mkdir -p "$top/tests/fuzz/findings"
    for c in $crashes; do cp "$work/crashes/$c" "$top/tests/fuzz/findings/"; done
    tail -n 40 "$work/crashes"/fuzz-*.log 2>/dev/null || tail -n 40 "$work/log"
    echo "run-fuzz: FINDINGS (exit status $status): ${crashes:-see the log above}; inputs in tests/fuzz/findings/"
    exit 1
fi
echo "run-fuzz: no crash, no broken invariant; corpus $before -> $(ls "$work/corpus" | wc -l) inputs"
if [ "$merge" = 1 ]; then
    # Into the corpus goes only what adds coverage to what it already has.
    n0=$(ls "$here/corpus/bootstrap" | wc -l)
    "$work/fuzz_bootstrap" -merge=1 "$here/corpus/bootstrap" "$work/corpus" >"$work/merge.log" 2>&1
    echo "run-fuzz: merged $(($(ls "$here/corpus/bootstrap" | wc -l) - n0)) new input(s) into tests/fuzz/corpus/bootstrap"
fi
