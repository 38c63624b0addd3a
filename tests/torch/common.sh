# common.sh — sourced by the torch_loom tests: integration/common.sh's helpers,
# plus TORCH_PYTHON (the interpreter configure found torch in) with the
# package as built (python/stage) on its path. Skips (one line) when the
# build has no torch_loom.
. "$(dirname "$0")/../integration/common.sh"
[ -n "${TORCH_PYTHON:-}" ] || skip "torch_loom is not built (no python with torch >= 2, or --without-torch)"
[ -f "$top_builddir/python/stage/torch_loom/_C.so" ] || skip "python/stage/torch_loom is not built (run make first)"
PYTHONPATH=$top_builddir/python/stage${PYTHONPATH:+:$PYTHONPATH}
PYTHONDONTWRITEBYTECODE=1
OMP_NUM_THREADS=1
export PYTHONPATH PYTHONDONTWRITEBYTECODE OMP_NUM_THREADS
TORCH_TESTS_DIR=$top_srcdir/tests/torch
