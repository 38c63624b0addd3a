#!/bin/sh
# pip.sh — torch_loom as a PyTorch user installs it: `pip install` of
# python/ (pyproject.toml, setup.py) into a fresh venv, against the libloom
# that pkg-config finds, then a 2-process all_reduce through the installed
# package. The "installed Loom" is this build: a loom.pc (from the build's
# own) whose libdir is .libs and includedir include/. The venv is made with
# --system-site-packages --without-pip, for the torch, pip and setuptools of
# TORCH_PYTHON, not a second download (pip installs into the venv that runs
# it); pip runs with --no-build-isolation --no-index for the same reason (a
# plain `pip install ./python`, with isolation, fetches only setuptools).
# The sources are copied first: pip builds in the tree.
set -u
. "$(dirname "$0")/common.sh"
command -v pkg-config >/dev/null 2>&1 || skip "no pkg-config"
"$TORCH_PYTHON" -c 'import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in ("venv", "pip", "setuptools")))' || skip "$TORCH_PYTHON lacks venv, pip or setuptools"
T=$TEST_TMPDIR
mkdir -p "$T/pc"
sed -e "s|^libdir=.*|libdir=$(cd "$top_builddir/.libs" && pwd)|" \
    -e "s|^includedir=.*|includedir=$(cd "$top_srcdir/include" && pwd)|" \
    "$top_builddir/loom.pc" >"$T/pc/loom.pc"
cp -R "$top_srcdir/python" "$T/src"
chmod -R u+w "$T/src" # a read-only source tree (make distcheck) copies read-only
rm -rf "$T/src/stage" "$T/src/build" "$T/src/torch_loom/"*.so
run_logged "$T/venv.log" "$TORCH_PYTHON" -m venv --system-site-packages --without-pip "$T/venv" ||
    { show_log "$T/venv.log"; fail "python -m venv failed"; }
PY=$T/venv/bin/python
# the compile against torch's headers: minutes of CPU, many on a loaded machine
LOOM_TEST_TIMEOUT=$((LOOM_TEST_TIMEOUT * 3))
run_logged "$T/pip.log" env PKG_CONFIG_PATH="$T/pc" "$PY" -m pip install --no-build-isolation \
    --no-index --no-deps "$T/src" || { show_log "$T/pip.log"; fail "pip install failed"; }
cat >"$T/allreduce.py" <<'PYEOF'
import os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp
import torch_loom

def run(rank, path):
    dist.init_process_group("loom", init_method="file://" + path, rank=rank, world_size=2)
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((1000,), 3.0)), t
    dist.destroy_process_group()
    print("pip: rank %d: all_reduce gave 3.0" % rank, flush=True)

if __name__ == "__main__":
    print("pip: torch_loom from " + os.path.dirname(torch_loom.__file__))
    mp.start_processes(run, args=(sys.argv[1],), nprocs=2, start_method="fork")
PYEOF
# PYTHONPATH cleared: the package must come from the venv, not python/stage
run_logged "$T/run.log" env -u PYTHONPATH "$PY" "$T/allreduce.py" "$T/init" ||
    { show_log "$T/run.log"; fail "the 2-process all_reduce failed"; }
grep '^pip:' "$T/run.log"
grep -q "^pip: torch_loom from $T/venv/" "$T/run.log" || record_failure "torch_loom was not imported from the venv"
[ "$(grep -c 'all_reduce gave 3.0' "$T/run.log")" -eq 2 ] || record_failure "not both ranks reported"
finish
