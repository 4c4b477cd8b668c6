#!/bin/bash
# session 38 call 3 (4 GPUs): the join waits after review (late joins, exposed after the last
# joins) on GPUs: test-gpu's report part at N <= 4; lab-1b every stage at N = 4 and 2, 20 steps;
# rank 3 held 20 ms at N = 4 (ZeRO-2 and DDP); the fill model's ZeRO-2 and ZeRO-3 at N = 4.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
PARTS=report LOGDIR=/tmp/x3/suite MPIEXEC=mpirun MAX_WORLD=4 timeout 240 scripts/test-gpu.sh > /tmp/x3_suite.txt 2>&1
echo "report part rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "FAIL|Synthesis" /tmp/x3_suite.txt | head -20 >> $OUT/log.txt
mkdir -p /tmp/x3/j
L="--layers 8 --dim 4096 --batch 8192"
for n in 4 2; do
  for s in stage0_ddp stage1 stage2 stage3; do
    mpirun --bind-to none -n $n build/cuda/$s $L --steps 20 --quiet --json /tmp/x3/j/${s}_N$n.json > /tmp/x3/j/${s}_N$n.txt 2>&1
    echo "N=$n $s rc=$?" >> $OUT/log.txt
  done
done
for s in stage0_ddp stage2; do
  ZL_TEST_HOLD_RANK=3:20 mpirun --bind-to none -x ZL_TEST_HOLD_RANK -n 4 build/cuda/$s $L --steps 20 --quiet --json /tmp/x3/j/${s}_N4_held3.json > /tmp/x3/j/${s}_N4_held3.txt 2>&1
  echo "held $s rc=$?" >> $OUT/log.txt
done
F="--layers 14 --dim 8192 --batch 1024"
for s in stage2 stage3; do
  mpirun --bind-to none -n 4 build/cuda/$s $F --steps 8 --quiet --json /tmp/x3/j/fill_${s}_N4.json > /tmp/x3/j/fill_${s}_N4.txt 2>&1
  echo "fill $s rc=$?" >> $OUT/log.txt
done
python3 lease/joinsum.py /tmp/x3/j/*.json >> $OUT/log.txt 2>&1
grep -A5 "join waits" /tmp/x3/j/stage2_N4_held3.txt >> $OUT/log.txt
echo "wall $((SECONDS-T0)) s" >> $OUT/log.txt
tar -C /tmp -czf $OUT/x3.tgz x3 x3_suite.txt
tail -75 $OUT/log.txt
