#!/bin/bash
# session 46 call 5 (2 x H200): (a) the report and loud parts of the GPU suite at HEAD (run.knobs and
# the run: line's knobs, new in a1b1860, on CUDA; the knob refusals), PARALLEL=1, MAX_WORLD=2;
# (b) a probe: ZeRO-3 lab-1b at N = 2 under the copy-engine gathers (ZL_NCCL_WINDOWS=1
# ZL_NCCL_CTA_POLICY=2) with --prefetch 1 (the default) and 2, alternating, two rounds of 20 steps.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
PARTS="report loud" PARALLEL=1 MAX_WORLD=2 MPIEXEC=mpirun LOGDIR=/tmp/k5s timeout -s TERM 300 scripts/test-gpu.sh > /tmp/k5_suite.txt 2>&1
echo "suite rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "^\(|Synthesis|FAIL|ended|UNFINISHED|Xid|stopped" /tmp/k5_suite.txt | head -30 >> $OUT/log.txt
gzip -c /tmp/k5_suite.txt > $OUT/suite.txt.gz
export ZL_GEMM_TABLE=tables/lab-1b-h200.json ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2
mkdir -p /tmp/k5_pf
for r in 1 2; do
  for pf in 1 2; do
    [ $((SECONDS-T0)) -lt 380 ] || break 2
    f=/tmp/k5_pf/stage3_N2_pf${pf}_$r
    timeout 60 mpirun -n 2 --bind-to none build/cuda/stage3 --layers 8 --dim 4096 --batch 8192 --steps 20 --prefetch $pf \
      --json $f.json > $f.txt 2>&1
    echo "stage3 N=2 windows prefetch $pf round $r rc=$? $((SECONDS-T0)) s: $(grep -m1 -o '[0-9.]* ms/step (median [0-9.]*)' $f.txt) $(grep -m1 -o 'param_hash[^,]*' $f.json) | $(grep -m1 '^run:' $f.txt | grep -o 'knobs:.*')" >> $OUT/log.txt
  done
done
tar -C /tmp -czf $OUT/k5.tgz k5s k5_pf
cat $OUT/log.txt
