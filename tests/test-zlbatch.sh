#!/bin/bash
# test-zlbatch.sh — build/zlbatch, the GPT's batch written for another framework (make test):
# rows·(T + 1) little-endian int32 tokens, the same bytes twice; a write cut short keeps the
# earlier file (exit 1); it refuses to write over its own --data text (exit 2, the text kept)
# and a --data it cannot read whole (a directory: exit 2);
# --help prints the usage (exit 0); bad counts ("2x", "+2"), a missing value and an --out it cannot
# open are refused with exit 2 and one line.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "test-zlbatch: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp data/persuasion.txt "$tmp/text.txt"
want=$(stat -c %s "$tmp/text.txt")
# gpt-tiny: B = 4 rows per rank, T = 32; 2 ranks, 1 micro-batch: 8 rows of 33 tokens
build/zlbatch --out "$tmp/a.bin" --ranks 2 --preset gpt-tiny --data "$tmp/text.txt"
build/zlbatch --out "$tmp/b.bin" --ranks 2 --preset gpt-tiny --data "$tmp/text.txt"
[ "$(stat -c %s "$tmp/a.bin")" -eq $((8 * 33 * 4)) ] || fail "a.bin has $(stat -c %s "$tmp/a.bin") bytes, want $((8 * 33 * 4))"
cmp -s "$tmp/a.bin" "$tmp/b.bin" || fail "two runs wrote different batches"
# a write cut short (a file-size limit, SIGXFSZ ignored: EFBIG) exits 1 and keeps the earlier batch
cp "$tmp/a.bin" "$tmp/keep.bin"
rc=0
(trap '' XFSZ; ulimit -f 8; build/zlbatch --out "$tmp/a.bin" --ranks 64 --preset gpt-tiny --data "$tmp/text.txt") 2> "$tmp/err" || rc=$?
[ "$rc" -eq 1 ] || fail "a write cut short: exit $rc, want 1: $(cat "$tmp/err")"
grep -q "File too large" "$tmp/err" || fail "a write cut short: $(cat "$tmp/err")"
cmp -s "$tmp/a.bin" "$tmp/keep.bin" || fail "a write cut short changed the earlier batch"
[ ! -e "$tmp/a.bin.zl-tmp" ] || fail "a write cut short left a.bin.zl-tmp"
rc=0
build/zlbatch --out "$tmp/text.txt" --preset gpt-tiny --data "$tmp/./text.txt" 2> "$tmp/err" || rc=$?
[ "$rc" -eq 2 ] || fail "--out naming --data: exit $rc, want 2"
grep -q "refusing to overwrite the input" "$tmp/err" || fail "--out naming --data: $(cat "$tmp/err")"
[ "$(stat -c %s "$tmp/text.txt")" -eq "$want" ] || fail "the --data text changed"
rc=0
build/zlbatch --out "$tmp/c.bin" --preset gpt-tiny --data "$tmp" 2> "$tmp/err" || rc=$?
[ "$rc" -eq 2 ] || fail "--data a directory: exit $rc, want 2"
grep -q "Is a directory" "$tmp/err" || fail "--data a directory: $(cat "$tmp/err")"
build/zlbatch --help > "$tmp/help" || fail "--help: exit $?, want 0"
grep -q "^usage: zlbatch --out FILE" "$tmp/help" || fail "--help: no usage on stdout"
for bad in "--ranks 2x" "--ranks +2" "--step 0" "--ranks"; do
    rc=0
    # shellcheck disable=SC2086 # the flags split on purpose
    build/zlbatch --out "$tmp/d.bin" $bad --preset gpt-tiny 2> "$tmp/err" || rc=$?
    if [ "$rc" -ne 2 ] || [ "$(wc -l < "$tmp/err")" -ne 1 ]; then fail "$bad: exit $rc, want 2 and one line: $(cat "$tmp/err")"; fi
done
rc=0
build/zlbatch --out "$tmp/no/such/dir" --preset gpt-tiny 2> "$tmp/err" || rc=$?
[ "$rc" -eq 2 ] || fail "--out in a missing directory: exit $rc, want 2"
echo "test-zlbatch: 8 rows of 33 tokens, the same bytes twice; a cut write keeps the earlier file (exit 1); --out over --data, a directory as --data, bad counts and an unopenable --out refused (exit 2); --help"
