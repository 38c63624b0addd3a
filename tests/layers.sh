#!/bin/sh
# layers.sh — no file of the library includes or calls a layer above its own
# (.ci/layers: include/ and algorithms/, src/base/, transports/, src/exec/
# with src/device/ and src/cuda/, the core). The include paths of Makefile.am
# make an upward include fail to compile; an upward call links, because the
# layers' convenience libraries are linked into one library, so this test is
# what fails on it: it reads the #include lines and, with nm, which object
# file defines each symbol another one uses. Skipped (77) without python3 or nm.
command -v python3 >/dev/null 2>&1 || { echo "layers.sh: SKIP: no python3"; exit 77; }
command -v nm >/dev/null 2>&1 || { echo "layers.sh: SKIP: no nm"; exit 77; }
exec python3 "${top_srcdir:-.}/.ci/layers" --srcdir "${top_srcdir:-.}" --builddir "${top_builddir:-.}"
