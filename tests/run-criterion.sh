#!/bin/sh
# run-criterion.sh BIN [ARGS...] — run a Criterion test binary (as make test shows it) and fail
# unless it exits 0 having run at least one test. A toolchain that drops Criterion's table of tests
# (Ubuntu 22.04's mpicc adds -flto; the Makefile now passes -fno-lto) leaves a binary that reports
# "Tested: 0" and exits 0: a pass that checked nothing.
set -u
echo "$*"
log=$(mktemp) && rcf=$(mktemp) || exit 1
trap 'rm -f "$log" "$rcf"' EXIT
{ "$@" 2>&1; echo $? > "$rcf"; } | tee "$log"
rc=$(cat "$rcf")
[ "$rc" = 0 ] || exit "$rc"
if ! grep -q 'Synthesis: Tested: [1-9]' "$log"; then
    echo "run-criterion: $1 ran no test (a build that dropped Criterion's test table?)" >&2
    exit 1
fi
