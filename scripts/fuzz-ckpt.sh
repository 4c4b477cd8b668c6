#!/bin/sh
# fuzz-ckpt.sh — the checkpoint loader fuzz at scale: N mutated checkpoints (default
# 10000; `make test` runs 2000) through the manifest parser and file checks, under
# ASan + UBSan. Every byte-level mutation must be refused with one line naming a file;
# re-sealed field edits must be refused or still make sense; nothing may crash.
#   scripts/fuzz-ckpt.sh [N]
set -eu
cd "$(dirname "$0")/.."
N="${1:-10000}"
make -s build/asan/test_unit
ZL_CKPT_FUZZ_N="$N" ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
    build/asan/test_unit --filter 'ckpt_fuzz/*' --verbose 2>&1 | grep -E 'ckpt fuzz|Synthesis|FAIL|ERROR|runtime error'
