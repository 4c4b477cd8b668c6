#!/bin/bash
# test-stage-files.sh — the four stage programs keep the shape the README promises (make test):
# each at most 400 lines, readable top to bottom; no preprocessor conditionals (no backend
# #ifdef: the backends sit behind kernels/backend.h); no word of the model's insides (the MLP
# sits behind model/model.h's unit interface); every include from common/, model/model.h or kernels/
# headers that are the same on both backends.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "test-stage-files: $*" >&2; exit 1; }
for f in stage0_ddp.c stage1.c stage2.c stage3.c; do
    n=$(wc -l < "$f")
    [ "$n" -le 400 ] || fail "$f has $n lines (at most 400)"
    if grep -nE '^[[:space:]]*#[[:space:]]*(if|ifdef|ifndef|elif)' "$f"; then fail "$f: a preprocessor conditional"; fi
    if grep -niE '\bmlp\b|zl_mlp' "$f"; then fail "$f names the MLP (model.h's units only)"; fi
    if grep -nE '#include[[:space:]]+"(kernels/(cuda|cpu)/|model/(mlp|gpt))' "$f"; then fail "$f includes a backend's or a model's insides"; fi
done
echo "test-stage-files: 4 stage files, $(cat stage0_ddp.c stage1.c stage2.c stage3.c | wc -l) lines in all, each <= 400, no #if, no model internals"
