# common.sh — sourced by the torch_loom tests: integration/common.sh's helpers,
# plus TORCH_PYTHON (the interpreter configure found torch in) with the
# package as built (python/stage) on its path. Skips (one line) when the
# build has no torch_loom, but in CI (see torch_skip).
. "$(dirname "$0")/../integration/common.sh"
# In CI (CI=true) a build meant to have torch (not --without-torch, not a
# sanitizer build) that lacks it fails these tests instead of skipping them.
torch_skip() {
    if [ "${CI:-}" = true ] && [ "${TORCH_WHY:-}" != --without-torch ] &&
        [ "${TORCH_WHY:-}" != sanitizers ]; then
        fail "$* (CI=true: torch was meant to be there; ./quickstart check installs it)"
    fi
    skip "$*"
}
[ -n "${TORCH_PYTHON:-}" ] || torch_skip "torch_loom is not built (${TORCH_WHY:-no python with torch >= 2})"
[ -f "$top_builddir/python/stage/torch_loom/_C.so" ] || torch_skip "python/stage/torch_loom is not built (run make first)"
PYTHONPATH=$top_builddir/python/stage${PYTHONPATH:+:$PYTHONPATH}
PYTHONDONTWRITEBYTECODE=1
OMP_NUM_THREADS=1
export PYTHONPATH PYTHONDONTWRITEBYTECODE OMP_NUM_THREADS
TORCH_TESTS_DIR=$top_srcdir/tests/torch
