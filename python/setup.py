"""Builds torch_loom._C for pip (pyproject.toml) from the sources that the
autotools build compiles too (python/torch_loom/).

Torch: the extension must match the torch it will be loaded into, so it is
built against the torch of the Python that runs pip, not one that pip would
put into an isolated build environment (a download of gigabytes, perhaps of
another version, with another ABI). torch-config, the script configure uses
as well, is run by that Python outside the build environment and prints the
compiler and linker flags. Loom: pkg-config's loom.pc (an installed Loom;
PKG_CONFIG_PATH for another prefix); the module finds libloom at run time
through the rpath of its libdir.
"""
import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, env=None):
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        err = getattr(e, "stderr", "") or str(e)
        sys.exit(f"torch_loom: {' '.join(cmd)} failed: {err.strip()}")


def torch_flags(what):
    # pip's build isolation hides the environment's site-packages through
    # PYTHONPATH and PYTHONNOUSERSITE; the interpreter itself is the one pip runs in.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}
    return shlex.split(run([sys.executable, os.path.join(HERE, "torch-config"), what], env))


def pkg_config(*args):
    return run(["pkg-config", *args, "loom"])


loom_cflags = shlex.split(pkg_config("--cflags"))
loom_libs = shlex.split(pkg_config("--libs"))
loom_libdir = pkg_config("--variable=libdir")

setup(
    version=pkg_config("--modversion"),
    ext_modules=[
        Extension(
            "torch_loom._C",
            sources=["torch_loom/backend.cpp"],
            language="c++",
            extra_compile_args=["-std=c++20", "-fvisibility=hidden", "-pthread"]
            + torch_flags("--cflags")
            + loom_cflags,
            extra_link_args=loom_libs + torch_flags("--libs") + [f"-Wl,-rpath,{loom_libdir}"],
        )
    ],
)
