#!/bin/bash
# test-table2.sh — scripts/gpu-table2.sh end to end on the CPU build (make test-scripts), with
# a pretend device of 1e6 bytes per rank (ZL_CPU_DEVICE_BYTES): for each configuration the
# predicted L must train with --check, L + 1 must be refused by the preflight (exit 2) and run
# out of memory without it (exit 1), and its own preflight inputs must give the same L.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "test-table2: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
BUILD=build/cpu MPIEXEC="${ZL_MPIEXEC:-mpiexec}" RANKS=2 DIM=32 BATCH=8 ZL_CPU_DEVICE_BYTES=1e6 TIMEOUT=120 \
    TIMEOUT_OFFLOAD=120 CONFIGS="stage0_ddp stage3 stage2+offload" bash scripts/gpu-table2.sh "$tmp/out" > "$tmp/log" 2>&1 ||
    { cat "$tmp/log"; fail "gpu-table2.sh failed"; }
tsv="$tmp/out/table2.tsv"
[ "$(tail -n +2 "$tsv" | wc -l)" -eq 3 ] || { cat "$tmp/log"; fail "expected 3 rows in table2.tsv"; }
# columns: 1 config, 12 pred_layers, 18 fit_layers, 24 fit_repredicted_layers, 25/26 L + 1 without the
# preflight (rc, out of memory), 28 L + 1 with it (rc)
tail -n +2 "$tsv" | awk -F'\t' '{
    if ($12 < 2 || $18 != $12 || $24 != $12 || $25 != 1 || $26 != "yes" || $28 != 2) { print "bad row: " $0; bad = 1 }
} END { exit bad }' || { cat "$tmp/log"; fail "a configuration did not behave as predicted"; }
grep -q '^| stage3 | 2 |' "$tmp/out/table2.md" || fail "table2.md lacks the stage3 row"
echo "test-table2: gpu-table2.sh on a pretend 1e6-byte device: predicted L trains, L + 1 exits 2 (preflight) and 1 (out of memory) for 3 configurations"
