#!/bin/sh
# manpages.sh — every public function and every tool has a manual page, and
# every page renders without a warning.
#
# 1. Each function declared in include/loom.h (a line that starts a
#    declaration, outside comments) has man/man3/<name>.3: its own page, or a
#    ".so man3/<family>.3" link to the page of its family, whose NAME line
#    must then list it. Each such page is installed (dist_man3_MANS).
# 2. Each program Makefile.am installs (bin_PROGRAMS: every tool in tools/
#    and loom-train) has man/man1/<name>.1, installed (dist_man1_MANS).
# 3. groff -ww -man -Tutf8 renders every page in man/ with nothing on
#    stderr (what `man -l page` would show as a warning).
# Skipped, in one line, where groff is not installed (quickstart installs it).
set -u
. "$(dirname "$0")/../integration/common.sh"

src=$top_srcdir
header=$src/include/loom.h
[ -r "$header" ] || fail "cannot read $header"
command -v groff >/dev/null 2>&1 || skip "groff is not installed (apt-get install groff-base)"

# The function names the header declares: lines outside /* */ comments of the
# form "type name(" at the start of a line, the type possibly "const char *".
funcs=$(sed -e 's,/\*.*\*/,,g' -e '/\/\*/,/\*\//d' "$header" |
    sed -n 's/^[a-z][A-Za-z0-9_ ]*[ *]\(loom[A-Z][A-Za-z0-9_]*\)(.*/\1/p' | sort -u)
nfuncs=$(printf '%s\n' "$funcs" | grep -c .)
[ "$nfuncs" -ge 40 ] || fail "found only $nfuncs functions in loom.h; the parser is wrong"
note "$nfuncs functions in include/loom.h"

# installed pages, as Makefile.am lists them (backslash continuations joined)
installed=$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$src/Makefile.am" |
    sed -n 's/^dist_man[137]_MANS[ +]*=//p' | tr -s ' \t' '\n')
is_installed() {
    printf '%s\n' "$installed" | grep -qx "$1"
}

# name_lists PAGE FUNC: FUNC is on PAGE's NAME line(s) (the text after .SH NAME)
name_lists() {
    sed -n '/^\.SH NAME/,/^\.SH/p' "$1" | sed 's/\\-/-/g; s/\\//g' |
        tr -s ', \t' '\n\n\n' | grep -qx "$2"
}

for f in $funcs; do
    page=man/man3/$f.3
    if [ ! -f "$src/$page" ]; then
        record_failure "$f (include/loom.h) has no manual page: add $page, or a"
        note "  '.so man3/<family>.3' link to its family's page with $f on its NAME line"
        continue
    fi
    is_installed "$page" || record_failure "$page is not in Makefile.am's dist_man3_MANS"
    target=$(sed -n 's/^\.so  *//p' "$src/$page" | head -n 1)
    if [ -n "$target" ]; then
        if [ ! -f "$src/man/$target" ]; then
            record_failure "$page links to $target, which does not exist"
        elif ! name_lists "$src/man/$target" "$f"; then
            record_failure "$page links to $target, whose NAME line does not list $f"
        fi
    elif ! name_lists "$src/$page" "$f"; then
        record_failure "$page: its NAME line does not list $f"
    fi
done

# the programs Makefile.am installs (bin_PROGRAMS: tools/ and train/loom-train)
programs=$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$src/Makefile.am" |
    sed -n 's/^bin_PROGRAMS[ +]*=//p' | tr -s ' \t' '\n' | grep .)
ntools=0
for p in $programs; do
    t=$(basename "$p")
    ntools=$((ntools + 1))
    page=man/man1/$t.1
    if [ ! -f "$src/$page" ]; then
        record_failure "$p has no manual page $page"
    elif ! is_installed "$page"; then
        record_failure "$page is not in Makefile.am's dist_man1_MANS"
    fi
done
for c in "$src"/tools/*.c; do
    grep -q '^int main(' "$c" || continue
    printf '%s\n' "$programs" | grep -qx "tools/$(basename "$c" .c)" ||
        record_failure "$c has a main but is not in bin_PROGRAMS; the test is wrong"
done
[ "$ntools" -ge 5 ] || record_failure "found only $ntools programs in bin_PROGRAMS; the test is wrong"
note "$ntools programs in bin_PROGRAMS"

# .so requests are relative to the man/ directory, as man(1) reads them
npages=0
for page in "$src"/man/man*/*.[0-9]; do
    rel=${page#"$src/man/"}
    npages=$((npages + 1))
    (cd "$src/man" && groff -ww -man -Tutf8 "$rel" 2>"$TEST_TMPDIR/warn" >/dev/null) ||
        record_failure "groff failed on man/$rel"
    if [ -s "$TEST_TMPDIR/warn" ]; then
        record_failure "groff -ww warns on man/$rel:"
        show_log "$TEST_TMPDIR/warn"
    fi
done
note "$npages pages rendered by groff -ww"
finish
