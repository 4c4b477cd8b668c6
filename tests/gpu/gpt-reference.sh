#!/bin/bash
# shellcheck disable=SC2086  # $extra carries several flags: split on purpose
# gpt-reference.sh BUILD [MAXWORLD] — zerolab's GPT against PyTorch (torch_gpt_reference.py):
# step 1's loss and gradient norm within 1e-3 relative, for gpt-tiny in every stage at N = 1 and
# 2 (and step 20, from trained weights), and gpt2-124m with fewer rows at N = 1. BUILD/ holds the
# programs (build/cpu: PyTorch on the CPU, gpt2-124m at --seq 64 to stay quick; build/cuda:
# PyTorch on the GPU when it has one, gpt2-124m at T = 1024). PYTHON names an interpreter with
# PyTorch (default python3); ZL_MPIEXEC the launcher. `make test-gpt-reference` runs it on
# build/cpu, scripts/test-gpu.sh on build/cuda.
set -u
build=${1:?usage: gpt-reference.sh BUILD [MAXWORLD]}
maxw=${2:-2}
py=${PYTHON:-python3}
ref=tests/gpu/torch_gpt_reference.py
device=cpu extra="--seq 64"
case $build in *cuda*) device=cuda extra="--batch 2" ;; esac
"$py" -c 'import torch' 2>/dev/null || { echo "gpt-reference: $py has no PyTorch (set PYTHON)" >&2; exit 2; }
[ -x build/zlbatch ] || { echo "gpt-reference: build/zlbatch missing (make cpu)" >&2; exit 2; }
fail=0
check() { "$py" "$ref" --build "$build" --device "$device" "$@" || fail=1; }
check -n 1 --stage 0 -- --preset gpt-tiny
if [ "$maxw" -ge 2 ]; then
    for s in 0 1 2 3; do check -n 2 --stage $s -- --preset gpt-tiny; done
    check -n 2 --stage 3 --step 20 -- --preset gpt-tiny --lr 3e-3
    check -n 2 --stage 2 -- --preset gpt-tiny --batch 2 --accum 2 --data data/persuasion.txt --loss-scale-init 4096
else
    echo "gpt-reference: N = 2 cases SKIPPED (max world $maxw): stages 1-3, step 20, --accum 2"
fi
check -n 1 --stage 0 -- --preset gpt2-124m --batch 1 $extra
[ $fail -eq 0 ] && echo "gpt-reference: ALL PASSED" || echo "gpt-reference: FAILURES"
exit $fail
