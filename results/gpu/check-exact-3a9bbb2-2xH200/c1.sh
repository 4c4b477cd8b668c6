#!/bin/bash
# stop 35 call 6 (2 × H200): --check now compares memory exactly (it allowed 1e-9 relative: whole
# bytes at 1e9 and more): every stage at N = 2 on lab-1b, the fill model, gpt2-124m, and --offload.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/check.log
run() { # name args...
    local name=$1; shift
    timeout 120 mpirun --bind-to none -n 2 "$@" --check --quiet --json /tmp/$name.json > /tmp/$name.txt 2>&1
    echo "$name rc=$? $(grep -E '^check:' /tmp/$name.txt | head -2 | tr '\n' ' ')" | tee -a $OUT/check.log
}
for s in stage0_ddp stage1 stage2 stage3; do run lab1b_$s build/cuda/$s --preset lab-1b --steps 3; done
for s in stage1 stage2 stage3; do run fill_$s build/cuda/$s --layers 14 --dim 8192 --batch 1024 --steps 2; done
for s in stage2 stage3; do run gpt124m_$s build/cuda/$s --preset gpt2-124m --batch 8 --steps 3; done
for s in stage2 stage3; do run offload_$s build/cuda/$s --preset lab-1b --steps 3 --offload; done
run lab1b_stage3_accum2 build/cuda/stage3 --preset lab-1b --batch 4096 --accum 2 --checkpoint-activations --steps 3
tar -C /tmp -czf $OUT/check-runs.tgz $(cd /tmp && ls *.json *.txt | grep -E "lab1b|fill|gpt124m|offload")
