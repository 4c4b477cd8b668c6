#!/bin/bash
# session 49 call 4 (4 x H200): README's GPU table at the session's code — every stage on lab-1b at
# N = 1, 2, 4, 20 steps (the first a warm-up), lab-1b's GEMM table, --check; stages in turn at each N,
# N = 4 first, then the same order reversed for a second run of each at N = 4 (run-to-run spread).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
R=/tmp/r1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S; T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total,driver_version --format=csv >> $S
export ZL_GEMM_TABLE=tables/lab-1b-h200.json
run() { local prog=$1 n=$2 tag=$3
  timeout 60 mpirun --bind-to none -n $n build/cuda/$prog --preset lab-1b --steps 20 --quiet --check --json $R/${prog}_N${n}$tag.json > $R/${prog}_N${n}$tag.txt 2>&1
  echo "$prog N=$n$tag rc=$? $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' $R/${prog}_N${n}$tag.txt) $(grep -oE 'param_hash [0-9a-f]+' $R/${prog}_N${n}$tag.txt) at $((SECONDS-T0)) s" >> $S; }
for n in 4 2 1; do for p in stage0_ddp stage1 stage2 stage3; do run $p $n ""; done; done
for p in stage3 stage2 stage1 stage0_ddp; do [ $((SECONDS-T0)) -lt 400 ] && run $p 4 _b; done
cat $S; tar -C /tmp -czf $OUT/r1.tgz r1; cp $S $OUT/
