#!/bin/bash
# session 38 call 4 (4 GPUs), a lease-only patch (pick.patch): lab-1b's dh and dW1 on the same-bits
# candidates that were fastest alone at the power cap (gemm-sustained-h200), against the trainer's
# first answers; one binary, the pick by ZL_TEST_GEMM_PICK=1. ZeRO-1 and ZeRO-2 at N = 4 and 2,
# 20 steps, three rounds, the pair's order swapped each round. Time and energy a step, hashes.
git apply lease/pick.patch || exit 1
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
mkdir -p /tmp/x4
L="--layers 8 --dim 4096 --batch 8192 --steps 20 --quiet"
one() { # $1 tag, $2 N, $3 stage, $4 pick (0/1)
  local f=/tmp/x4/$1_$3_N$2_p$4
  ZL_TEST_GEMM_PICK=$4 mpirun --bind-to none -x ZL_TEST_GEMM_PICK -n $2 build/cuda/$3 $L --json $f.json > $f.txt 2>&1
  echo "$1 N=$2 $3 pick=$4 rc=$? $(python3 -c "
import json; j=json.load(open('$f.json')); c=j['ranks'][0]['clocks']
print('median %.2f ms mean %.2f J/step %s hash %s' % (j['ms_per_step_median'], j['ms_per_step'], c.get('energy_j_per_step'), j['param_hash']))")" >> $OUT/log.txt
}
T0=$SECONDS
for r in 1 2 3; do
  for n in 4 2; do
    for s in stage1 stage2; do
      if [ $((r % 2)) = 1 ]; then one r$r $n $s 0; one r$r $n $s 1; else one r$r $n $s 1; one r$r $n $s 0; fi
    done
  done
done
grep -h "gemm-pick" /tmp/x4/r1_stage1_N4_p1.txt | sort | uniq -c >> $OUT/log.txt
echo "wall $((SECONDS-T0)) s" >> $OUT/log.txt
tar -C /tmp -czf $OUT/x4.tgz x4
cat $OUT/log.txt
