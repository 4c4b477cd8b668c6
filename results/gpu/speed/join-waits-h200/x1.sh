#!/bin/bash
# session 38 call 1 (4 GPUs): join waits on GPUs. (1) test-gpu's report part at N <= 4 (the join
# tests, the trace recomputation, a held rank); (2) lab-1b at N = 4 and 2, every stage, 20 steps,
# JSON kept: exposed communication, its join wait, the rest, per rank; (3) lab-1b ZeRO-2 N = 4 with
# rank 3 held 20 ms before every step; (4) traces of DDP and ZeRO-2 at N = 4.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
PARTS=report LOGDIR=/tmp/x1/suite MPIEXEC=mpirun MAX_WORLD=4 timeout 240 scripts/test-gpu.sh > /tmp/x1_suite.txt 2>&1
echo "report part rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "FAIL|Synthesis|rc=|passed|failed" /tmp/x1_suite.txt | head -20 >> $OUT/log.txt
mkdir -p /tmp/x1/j
L="--layers 8 --dim 4096 --batch 8192"
for n in 4 2; do
  for s in stage0_ddp stage1 stage2 stage3; do
    mpirun --bind-to none -n $n build/cuda/$s $L --steps 20 --quiet --json /tmp/x1/j/${s}_N$n.json > /tmp/x1/j/${s}_N$n.txt 2>&1
    echo "N=$n $s rc=$?" >> $OUT/log.txt
  done
done
ZL_TEST_DELAY_RANK=3:20 mpirun --bind-to none -x ZL_TEST_DELAY_RANK -n 4 build/cuda/stage2 $L --steps 20 --quiet --json /tmp/x1/j/stage2_N4_held3.json > /tmp/x1/j/stage2_N4_held3.txt 2>&1
echo "held rc=$?" >> $OUT/log.txt
for s in stage0_ddp stage2; do
  mpirun --bind-to none -n 4 build/cuda/$s $L --steps 6 --json /tmp/x1/j/${s}_N4_traced.json --trace /tmp/x1/j/${s}_N4.trace.json > /tmp/x1/j/${s}_N4_traced.txt 2>&1
  echo "traced $s rc=$?" >> $OUT/log.txt
done
python3 lease/joinsum.py /tmp/x1/j/*.json >> $OUT/log.txt 2>&1
grep -A4 "join waits" /tmp/x1/j/stage2_N4_traced.txt >> $OUT/log.txt
echo "wall $((SECONDS-T0)) s" >> $OUT/log.txt
tar -C /tmp -czf $OUT/x1.tgz x1 x1_suite.txt
cat $OUT/log.txt | tail -60
