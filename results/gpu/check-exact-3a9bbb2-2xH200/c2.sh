#!/bin/bash
# stop 35 call 7 (4 × H200): --check with memory exact at N = 4 and 3 (units padded unevenly), and
# the report's 3-rank test the 2-GPU machine skipped.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/check4.log
run() { # name n args...
    local name=$1 n=$2; shift 2
    timeout 120 mpirun --bind-to none -n $n "$@" --check --quiet --json /tmp/$name.json > /tmp/$name.txt 2>&1
    echo "$name rc=$? $(grep -E '^check:' /tmp/$name.txt | head -2 | tr '\n' ' ')" | tee -a $OUT/check4.log
}
for s in stage0_ddp stage1 stage2 stage3; do run lab1b_${s}_N4 4 build/cuda/$s --preset lab-1b --steps 3; done
for s in stage1 stage3; do run lab1b_${s}_N3 3 build/cuda/$s --preset lab-1b --steps 3; done
run gpt124m_stage3_N4 4 build/cuda/stage3 --preset gpt2-124m --batch 8 --steps 3
ZL_BUILD=build/cuda ZL_MPIEXEC="mpirun --oversubscribe" ZL_MAX_WORLD=4 build/gpu-tests/test_report --filter 'timeline/*' -j1 2>&1 | tail -2 | tee -a $OUT/check4.log
tar -C /tmp -czf $OUT/check4-runs.tgz $(cd /tmp && ls *.json *.txt | grep -E "_N[34]")
